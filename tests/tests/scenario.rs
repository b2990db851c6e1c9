//! A whole-system scenario: many subscriptions and events, 30 % failing endpoints, the full
//! retry schedule on virtual time; the ledger must balance exactly. The test runs 100 x 100
//! (10,000 deliveries); `edgehook-sim` runs any size (1,000 x 1,000 is in BENCHMARKS.md).

use edgehook_sim::scenario::{self, Scenario};

#[test]
fn the_retry_schedule_ends_exactly_as_specified() {
    let s = Scenario {
        subscriptions: 100,
        events: 100,
        ..Scenario::default()
    };
    let o = scenario::run(&s).expect("scenario runs");
    println!("{o:?}");
    assert_eq!(o.check(&s), Ok(()));
    assert_eq!(o.created, 10_000);
    assert!(
        o.failed > 0 && o.cancelled > 0,
        "the scenario exercises failure and disabling"
    );
}

#[test]
fn the_ledger_check_catches_violations() {
    let s = Scenario {
        subscriptions: 10,
        events: 2,
        ..Scenario::default()
    };
    let good = scenario::Outcome {
        created: 20,
        succeeded: 2 * (0..10).filter(|i| !scenario::is_failing(&s, *i)).count(),
        disabled: (0..10).filter(|i| scenario::is_failing(&s, *i)).count(),
        ..scenario::Outcome::default()
    };
    let mut good = good;
    good.failed = good.created - good.succeeded;
    assert_eq!(good.check(&s), Ok(()));
    for broken in [
        scenario::Outcome {
            pending: 1,
            ..good.clone()
        },
        scenario::Outcome {
            max_attempts: 4,
            ..good.clone()
        },
        scenario::Outcome {
            off_schedule: 1,
            ..good.clone()
        },
        scenario::Outcome {
            requests_received: 1,
            ..good.clone()
        },
        scenario::Outcome {
            cancelled: 1,
            ..good.clone()
        },
    ] {
        assert!(broken.check(&s).is_err(), "{broken:?}");
    }
}
