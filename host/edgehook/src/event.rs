//! `edgehook event show ID` and `edgehook event find --load-id L-123`: where did a load go.
//! The operator looks up an event by its id (`GET /internal/v1/events/{id}`), or the events
//! of a load id within the retention period (`GET /internal/v1/events?loadId=`), each with
//! every delivery it made: its subscription, status and attempts.

use crate::cli;

/// The commands (`R`: the binary's server and token flags).
#[derive(clap::Subcommand, Debug)]
pub enum EventCommand<R: clap::Args> {
    /// An event with every delivery it made.
    Show {
        /// The event id (evt_...), as the publish answered it.
        id: String,
        /// The server and the operator token.
        #[command(flatten)]
        remote: R,
    },
    /// The events of a load id within the retention period, newest first, with their
    /// deliveries.
    Find {
        /// The load's id, as published.
        #[arg(long)]
        load_id: String,
        /// The server and the operator token.
        #[command(flatten)]
        remote: R,
    },
}

impl<R: clap::Args> EventCommand<R> {
    /// The server flags and the path of the (GET) request.
    pub fn request(&self) -> (&R, String) {
        match self {
            EventCommand::Show { id, remote } => {
                (remote, format!("/internal/v1/events/{}", cli::segment(id)))
            }
            EventCommand::Find { load_id, remote } => (
                remote,
                format!("/internal/v1/events?loadId={}", cli::segment(load_id)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Args, Debug)]
    struct NoRemote;

    #[test]
    fn each_command_asks_its_path_with_the_load_id_escaped() {
        let show = EventCommand::Show {
            id: "evt_1".to_owned(),
            remote: NoRemote,
        };
        assert_eq!(show.request().1, "/internal/v1/events/evt_1");
        let find = EventCommand::Find {
            load_id: "L 1/2&x".to_owned(),
            remote: NoRemote,
        };
        assert_eq!(find.request().1, "/internal/v1/events?loadId=L%201%2F2%26x");
    }
}
