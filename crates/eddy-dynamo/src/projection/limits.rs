//! DynamoDB's limits on one row write, and how a plan is cut to fit them.
//!
//! A row write is one `PutItem`, or one `TransactWriteItems` with its
//! outbox effects: at most 100 items (the row and 99 effects), 4 MB
//! together, each item at most 400 KB. A plan that does not fit is planned
//! again with a cap on its effect-producing events: the fold stops before
//! the first event that would not fit (the greatest prefix that does, so a
//! row takes the fewest writes the limits allow), the write moves the
//! checkpoints as far as it folded, and the next write takes the rest. An
//! event's effects are never split. A row item over 400 KB because of new
//! checkpoint entries is planned again with new instances refused (each
//! fails on its own); over 400 KB otherwise, no split helps.

use super::effects::PendingEffect;
use crate::item::{MAX_ITEM_SIZE, MAX_TRANSACTION_SIZE};
use crate::outbox::MAX_EFFECTS_PER_WRITE;

/// What a plan must respect beyond its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Instances without a checkpoint in the row fail instead of adding
    /// one: the row item was this large with them.
    pub refuse_new: Option<usize>,
    /// Stop before the effect-producing event after this many.
    pub cap: Option<usize>,
}

impl Limits {
    /// What every write's plan starts from: at most 99 effect-producing
    /// events, since each adds at least one of the 99 effect items a write
    /// holds beside the row. Folding no further bounds a write's plan, and
    /// `fit` then cuts the greatest prefix of them that fits. (Each write
    /// starts here again, not from the cap the last one needed: a cap kept
    /// from a write of large events made every later write as short.)
    pub(crate) fn one_write() -> Self {
        Self {
            refuse_new: None,
            cap: Some(MAX_EFFECTS_PER_WRITE),
        }
    }
}

/// The limit a row item is held to.
pub(crate) const ITEM_LIMIT: &str = "400 KB per item";
/// The limit a transaction is held to.
pub(crate) const TRANSACTION_LIMIT: &str = "4 MB per transaction";

/// The effects of one event: a run of consecutive effects with the same
/// source, instance and version (an applied event's effects are kept
/// together, in fold order).
pub(crate) fn event_runs(effects: &[PendingEffect]) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (at, effect) in effects.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if same_event(&effects[run.start], effect) => run.end = at + 1,
            _ => runs.push(at..at + 1),
        }
    }
    runs
}

fn same_event(a: &PendingEffect, b: &PendingEffect) -> bool {
    a.version == b.version && a.source == b.source && a.stream_id == b.stream_id
}

/// Whether a write of a row item of `row_size` with effect items of
/// `sizes` fits one transaction.
pub(crate) fn fits(row_size: usize, sizes: &[usize]) -> bool {
    sizes.len() <= MAX_EFFECTS_PER_WRITE
        && sizes.iter().all(|s| *s <= MAX_ITEM_SIZE)
        && row_size + sizes.iter().sum::<usize>() <= MAX_TRANSACTION_SIZE
}

/// How many of the plan's effect-producing events fit one write beside a
/// row item of `row_size`, taken in fold order.
pub(crate) fn events_that_fit(
    effects: &[PendingEffect],
    sizes: &[usize],
    row_size: usize,
) -> usize {
    let mut fitting = 0;
    for run in event_runs(effects) {
        if !fits(row_size, &sizes[..run.end]) {
            break;
        }
        fitting += 1;
    }
    fitting
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_item::StreamId;
    use crate::item::s;

    fn effect(version: u64) -> PendingEffect {
        PendingEffect {
            source: "weigh".into(),
            stream_id: StreamId::new([("sessionId", "w-1")]),
            version,
            payload: s("x"),
        }
    }

    #[test]
    fn the_greatest_prefix_of_whole_events_fits() {
        // Two effects for event 1, then one each.
        let effects: Vec<PendingEffect> = [1, 1, 2, 3, 4].map(effect).to_vec();
        assert_eq!(event_runs(&effects), vec![0..2, 2..3, 3..4, 4..5]);
        let small = [10; 5];
        assert_eq!(events_that_fit(&effects, &small, 100), 4);
        // 4 MB: the row and effects of 400 000 bytes.
        let twelve: Vec<PendingEffect> = (1..=12).map(effect).collect();
        let large = [400_000; 12];
        assert_eq!(events_that_fit(&twelve, &large, 100), 10);
        assert_eq!(
            events_that_fit(&twelve, &large, 200_000),
            9,
            "the row counts"
        );
        // An effect over 400 KB fits nowhere.
        let oversized = [10, 10, MAX_ITEM_SIZE + 1, 10, 10];
        assert_eq!(events_that_fit(&effects, &oversized, 100), 1);
    }

    #[test]
    fn a_hundred_items_is_the_row_and_99_effects() {
        let effects: Vec<PendingEffect> = (1..=150).map(effect).collect();
        assert_eq!(events_that_fit(&effects, &[1; 150], 1), 99);
        let one_event: Vec<PendingEffect> = (0..100).map(|_| effect(1)).collect();
        assert_eq!(events_that_fit(&one_event, &[1; 100], 1), 0);
    }
}
