#!/usr/bin/env bash
# The dependency graph of edgehook's own code, as ARCHITECTURE.md shows it, and a check that
# it has no cycle:
#  - crates: each workspace crate → the edgehook crates it depends on ([dependencies] and
#    [build-dependencies]; dev-dependencies are left out, as cargo allows their cycles);
#  - modules: within each crate, each module → the sibling modules its code names through
#    `crate::` (test-only code left out: `tests.rs` and `*_tests.rs`, `tests/`, and a file's code from its
#    first `#[cfg(test)]` on; `//` comments too).
# Exits 1 if either graph has a cycle (tsort finds it). Usage: tools/depgraph.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
check_only=false
[ "${1:-}" = "--check" ] && check_only=true
status=0

# The project's files (tracked, or new and not ignored), fuzz/ aside (its own workspace).
files() { git ls-files --cached --others --exclude-standard "$@" | grep -v '^fuzz/'; }

crate_edges() {
  for toml in $(files '*Cargo.toml'); do
    name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$toml" | head -1)
    [ -n "$name" ] || continue # the workspace manifest
    deps=$(awk '
      /^\[/ { on = ($0 == "[dependencies]" || $0 == "[build-dependencies]" || $0 ~ /^\[target\..*\.dependencies\]$/) ; next }
      on && /^edgehook(-[a-z-]+)? *[.=]/ { split($0, a, /[ .=]/); print a[1] }
    ' "$toml" | sort -u | paste -sd' ')
    echo "$name → ${deps:-(none)}"
  done | sort
}

module_edges() { # $1: a crate's src directory
  local src=$1
  find "$src" -name '*.rs' ! -name '*tests.rs' ! -path '*/tests/*' | sort | while read -r f; do
    local rel=${f#"$src"/}
    local m=${rel%.rs}; m=${m%/mod}; m=${m//\//::}
    [ "$m" = lib ] || [ "$m" = main ] && continue
    local uses
    uses=$(awk '/^#\[cfg\(test\)\]/{exit} {sub(/\/\/.*/, "")} {print}' "$f" \
      | grep -oE 'crate::(\{[^}]*\}|[a-z_]+)' | sed -E 's/crate:://; s/[{} ]//g' | tr , '\n' \
      | sed 's/::.*//' | grep -E '^[a-z_]+$' | grep -vx "${m%%::*}" | sort -u | paste -sd' ' || true)
    echo "$m → ${uses:-(none)}"
  done
}

acyclic() { # stdin: "a → b c" lines; fails on a cycle
  awk -F' → ' '{ n = split($2, d, " "); print $1, $1; for (i = 1; i <= n; i++) if (d[i] != "(none)") print $1, d[i] }' \
    | tsort >/dev/null 2>&1
}

edges=$(crate_edges)
$check_only || { echo "## crates"; echo "$edges"; }
if ! acyclic <<<"$edges"; then echo "CYCLE among crates"; status=1; fi

for src in $(files '*/src/lib.rs' '*/src/main.rs' | xargs -n1 dirname | sort -u); do
  edges=$(module_edges "$src")
  [ -z "$edges" ] && continue
  $check_only || { echo; echo "## $src"; echo "$edges"; }
  if ! acyclic <<<"$edges"; then echo "CYCLE among the modules of $src"; status=1; fi
done
exit $status
