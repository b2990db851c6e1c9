//! Replay jobs as stored (`rpl:{id}`): which deliveries a replay by range selects (its
//! subscriptions, time range, statuses and event types), how far it got, and its progress.

use crate::delivery::Status;
use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::ids::{ClientId, ReplayJobId, SubscriptionId};

/// Where a replay job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Reading its subscriptions' histories, listing the deliveries that match.
    Selecting,
    /// Replaying the listed deliveries, a bounded batch per tick.
    Replaying,
    /// Every listed delivery was replayed (or could not be).
    Done,
    /// Cancelled before it was done: what it replayed stays replayed.
    Cancelled,
}

impl JobState {
    /// The name the API shows.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Selecting => "selecting",
            JobState::Replaying => "replaying",
            JobState::Done => "done",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job still has work to do.
    pub fn running(self) -> bool {
        matches!(self, JobState::Selecting | JobState::Replaying)
    }
}

/// The delivery statuses a replay may select, as the API names them.
pub const STATUS_NAMES: [(&str, Status); 4] = [
    ("failed", Status::Failed),
    ("skipped", Status::Skipped),
    ("delivered", Status::Succeeded),
    ("cancelled", Status::Cancelled),
];

/// A replay job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayJob {
    /// `rpl_...`.
    pub id: ReplayJobId,
    /// The client that asked for it (a partner, for its own subscription), or `None` for
    /// the operator.
    pub client_id: Option<ClientId>,
    /// The subscriptions whose deliveries it replays, in order (none: see `search_client`).
    pub subscriptions: Vec<SubscriptionId>,
    /// Deliveries created at or after this (ms since the epoch)...
    pub since: u64,
    /// ... and before this.
    pub until: u64,
    /// The statuses it selects (a delivery in another status is left alone).
    pub statuses: Vec<Status>,
    /// The event types it selects (empty: every type).
    pub event_types: Vec<String>,
    /// Where it is.
    pub state: JobState,
    /// When it was created (ms since the epoch).
    pub created_at: u64,
    /// When it finished or was cancelled.
    pub finished_at: Option<u64>,
    /// Selection: the index in `subscriptions` being read...
    pub cursor_sub: u32,
    /// ... the last history entry read of it...
    pub cursor_seq: u64,
    /// ... and the history's length when its reading began (later deliveries are newer
    /// than `until` anyway).
    pub cursor_end: u64,
    /// Deliveries selected (final once the state is past `selecting`): the sum of the
    /// selection records' lengths.
    pub total: u64,
    /// Deliveries replayed.
    pub done: u64,
    /// Deliveries that could not be replayed (the subscription disabled or deleted since,
    /// the record gone).
    pub failed: u64,
    /// Until when a tick holds the job (ms since the epoch): one tick advances it at a time.
    pub lease_until: u64,
    /// Selection records written (`rpl:{id}:s{n}`, one per selecting step that found some).
    pub selections: u32,
    /// Replaying: the selection record being replayed...
    pub replay_record: u32,
    /// ... and how many of its deliveries are done.
    pub replay_offset: u32,
    /// With no `subscriptions`: the job replays every subscription's deliveries in the range
    /// (read by day, as the operator's search does), of this client's only if given.
    pub search_client: Option<ClientId>,
}

/// First byte of a replay job record ([`ReplayJob::encode`]): its format's version.
const REPLAY_V1: u8 = 0xC1;

fn status_code(s: Status) -> u8 {
    STATUS_NAMES
        .iter()
        .position(|(_, t)| *t == s)
        .map_or(u8::MAX, |i| i as u8)
}

impl ReplayJob {
    /// The stored record: `REPLAY_V1`, then every field in declaration order.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(REPLAY_V1, 256 + 32 * self.subscriptions.len());
        w.str(&self.id)
            .opt(self.client_id.as_deref(), Writer::str)
            .list(&self.subscriptions, |w, s| w.str(s))
            .u64(self.since)
            .u64(self.until)
            .list(&self.statuses, |w, s| w.u8(status_code(*s)))
            .list(&self.event_types, |w, s| w.str(s))
            .u8(match self.state {
                JobState::Selecting => 0,
                JobState::Replaying => 1,
                JobState::Done => 2,
                JobState::Cancelled => 3,
            })
            .u64(self.created_at)
            .opt(self.finished_at, Writer::u64)
            .u32(self.cursor_sub)
            .u64(self.cursor_seq)
            .u64(self.cursor_end)
            .u64(self.total)
            .u64(self.done)
            .u64(self.failed)
            .u64(self.lease_until)
            .u32(self.selections)
            .u32(self.replay_record)
            .u32(self.replay_offset)
            .opt(self.search_client.as_deref(), Writer::str);
        w.finish()
    }

    /// Reads a stored record ([`ReplayJob::encode`]); `None` if damaged.
    pub fn decode(bytes: &[u8]) -> Option<ReplayJob> {
        let mut r = Reader::new(bytes, REPLAY_V1)?;
        let job = ReplayJob {
            id: r.id()?,
            client_id: r.opt(Reader::id)?,
            subscriptions: r.list(4, Reader::id)?,
            since: r.u64()?,
            until: r.u64()?,
            statuses: r.list(1, |r| {
                STATUS_NAMES.get(usize::from(r.u8()?)).map(|(_, s)| *s)
            })?,
            event_types: r.list(4, Reader::str)?,
            state: match r.u8()? {
                0 => JobState::Selecting,
                1 => JobState::Replaying,
                2 => JobState::Done,
                3 => JobState::Cancelled,
                _ => return None,
            },
            created_at: r.u64()?,
            finished_at: r.opt(Reader::u64)?,
            cursor_sub: r.u32()?,
            cursor_seq: r.u64()?,
            cursor_end: r.u64()?,
            total: r.u64()?,
            done: r.u64()?,
            failed: r.u64()?,
            lease_until: r.u64()?,
            selections: r.u32()?,
            replay_record: r.u32()?,
            replay_offset: r.u32()?,
            search_client: r.opt(Reader::id)?,
        };
        r.end()?;
        Some(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_job_reads_back_whole_and_damage_is_refused() {
        let job = ReplayJob {
            id: "rpl_0123456789abcdef01234567".into(),
            client_id: Some("acme".into()),
            subscriptions: vec!["sub_a".into(), "sub_b".into()],
            since: 1,
            until: 2,
            statuses: vec![Status::Failed, Status::Skipped, Status::Succeeded],
            event_types: vec!["load.created".into()],
            state: JobState::Replaying,
            created_at: 3,
            finished_at: Some(4),
            cursor_sub: 1,
            cursor_seq: 70,
            cursor_end: 90,
            total: 12,
            done: 5,
            failed: 1,
            lease_until: 6,
            selections: 3,
            replay_record: 1,
            replay_offset: 7,
            search_client: Some("acme".into()),
        };
        let bytes = job.encode();
        assert_eq!(bytes[0], REPLAY_V1);
        assert_eq!(ReplayJob::decode(&bytes), Some(job.clone()));
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            ReplayJob::decode(b).is_some()
        });
        let operator = ReplayJob {
            client_id: None,
            finished_at: None,
            state: JobState::Cancelled,
            ..job
        };
        assert_eq!(ReplayJob::decode(&operator.encode()), Some(operator));
    }
}
