//! What `demo` must leave beyond the final rows: each kept row's
//! checkpoints and the notices delivered. Checked by `verify` (through the
//! AWS SDK) and by the scenario's tests.

/// The final checkpoints of each kept row, `<source>#<stream id>` →
/// version. An instance's checkpoint stops at its last event for the row:
/// order o-1's third event is sh-1's, its second sh-2's.
pub fn expected_checkpoints(id: &str) -> Vec<(&'static str, u64)> {
    match id {
        "sh-1" => vec![
            ("order#orderId=o-1", 3),
            ("scan#shipmentId=sh-1", 3),
            ("weigh#sessionId=w-1", 2),
        ],
        "sh-2" => vec![
            ("order#orderId=o-1", 2),
            ("scan#shipmentId=sh-2", 1),
            ("weigh#sessionId=w-1", 3),
        ],
        // The tombstone keeps the checkpoints of the instance that removed it.
        _ => vec![("order#orderId=o-2", 2)],
    }
}

/// Every notice the scans can produce, in order. Scans fold in `latest`
/// mode: a batch applies only the newest scan of each shipment, so with
/// batches of one record every scan leaves a notice, and with larger ones
/// the notices are an ordered subset ending with the last location.
pub fn all_notices(id: &str) -> Vec<&'static str> {
    match id {
        "sh-1" => vec!["at Hamburg", "at Rotterdam", "at Felixstowe"],
        "sh-2" => vec!["at Antwerp"],
        _ => Vec::new(),
    }
}

/// Checks the notices delivered for shipment `id` after folding in batches
/// of `batch` records: `Err` says how they differ.
pub fn check_notices(id: &str, got: &[String], batch: usize) -> Result<(), String> {
    let all = all_notices(id);
    let fits = if batch == 1 {
        got.iter().map(String::as_str).eq(all.iter().copied())
    } else {
        let mut rest = all.iter();
        got.iter().all(|n| rest.any(|a| a == n))
            && got.last().map(String::as_str) == all.last().copied()
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "{id}: notices {got:?} after batches of {batch}; every scan's notice: {all:?}"
        ))
    }
}
