//! ARCHITECTURE.md's dependency graphs are what `tools/depgraph.sh --doc` prints: the block
//! between its `depgraph` markers is generated, never edited by hand
//! (`tools/depgraph.sh --write` rewrites it), and the script finds no cycle.

use std::path::Path;
use std::process::Command;

#[test]
fn architecture_md_shows_the_graphs_depgraph_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .args(["tools/depgraph.sh", "--doc"])
        .current_dir(&root)
        .output()
        .expect("run tools/depgraph.sh with bash");
    assert!(
        out.status.success(),
        "tools/depgraph.sh --doc failed (a cycle?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("utf-8 output");
    let printed: Vec<&str> = printed.lines().collect();
    let (Some(begin), Some(end)) = (printed.first(), printed.last()) else {
        panic!("tools/depgraph.sh --doc printed nothing");
    };
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let committed: Vec<&str> = doc
        .lines()
        .skip_while(|l| l != begin)
        .scan(false, |done, l| {
            (!*done).then(|| {
                *done = l == *end;
                l
            })
        })
        .collect();
    assert!(
        committed.first() == Some(begin) && committed.last() == Some(end),
        "ARCHITECTURE.md has no block between {begin:?} and {end:?}"
    );
    assert!(
        committed == printed,
        "ARCHITECTURE.md's dependency graphs differ from what tools/depgraph.sh prints; \
         run tools/depgraph.sh --write and commit ARCHITECTURE.md.\ncommitted:\n{}\n\nprinted:\n{}",
        committed.join("\n"),
        printed.join("\n")
    );
}
