//! # edgehook
//!
//! The parts of the `edgehook` binary: [`start`] (`edgehook serve`'s flags and settings) and [`serve`] (the component behind a real HTTP server,
//! HTTP/1.1, or with [`tls`] HTTPS with HTTP/2 too, with a timer that ticks when work is due
//! and a graceful shutdown; [`metrics`], its Prometheus endpoint; [`portal`], which paths go to
//! the web portal's component), [`listen`] (a local receiver that verifies signatures), [`cli`]
//! (the admin token file and the operator commands' HTTP client), [`control`] (`serve`'s
//! control socket: the store's copy for `edgehook backup`), [`kv`] (`serve`'s Redis flags:
//! one Redis or a Redis Cluster), [`inspect`] (`edgehook store`:
//! a copy of the store read for inspection), [`replay`] (replays by
//! range with a progress bar), [`update`] (a partner's change of a subscription's URL or
//! event types), [`event`] (where did a load go: an event, a load id's events), [`rotate`] (the operator's rotation of a partner's secret), [`reseal`] (a pass sealing every stored secret under the
//! current key), [`signals`] (what `serve` does on `SIGTERM` and `SIGHUP`),
//! [`receiver`] (the small HTTP server `listen` and the tools' loopback receivers run on) and
//! [`healthcheck`] (one `GET` of a health URL: the container image's health check). The component and its imports are
//! `edgehook-runtime`'s.

pub mod cli;
pub mod control;
pub mod event;
pub mod healthcheck;
pub mod inspect;
pub mod kv;
pub mod listen;
pub mod metrics;
pub mod portal;
pub mod receiver;
pub mod replay;
pub mod reseal;
pub mod rotate;
pub mod serve;
pub mod signals;
pub mod start;
pub mod tls;
pub mod update;
