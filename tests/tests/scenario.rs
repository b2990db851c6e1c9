//! A whole-system scenario: many subscriptions and events, 30 % failing endpoints, the full
//! retry schedule on virtual time; the ledger must balance exactly.

use edgehook_host::scenario::{self, Scenario};

#[test]
fn the_retry_schedule_ends_exactly_as_specified() {
    let s = Scenario {
        subscriptions: 100,
        events: 100,
        ..Scenario::default()
    };
    let o = scenario::run(&s).expect("scenario runs");
    println!("{o:?}");
    let healthy = (0..s.subscriptions)
        .filter(|i| !scenario::is_failing(&s, *i))
        .count();
    assert!(healthy < s.subscriptions && healthy > 0);
    assert_eq!(o.pending, 0, "the schedule ran out");
    assert_eq!(o.created, o.succeeded + o.failed + o.cancelled);
    assert_eq!(
        o.succeeded,
        healthy * s.events,
        "every healthy endpoint got every event"
    );
    assert!(o.max_attempts <= 3, "never a 4th attempt");
    assert_eq!(o.irregular, 0);
    assert_eq!(o.off_schedule, 0, "every attempt ran at its due time");
    assert_eq!(
        o.attempts, o.requests_received,
        "every recorded attempt was sent, once"
    );
    assert_eq!(
        o.disabled,
        s.subscriptions - healthy,
        "failing endpoints end disabled"
    );
    assert!(o.failed >= 5 * (s.subscriptions - healthy));
}
