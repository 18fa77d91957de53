//! A deliverer's loop: drain the outbox, again and again.

use std::future::Future;
use std::time::Duration;

use eddy_dynamo::{Deliver, Error, Outbox, PendingReport};

/// Drains every row's pending effects through `deliver`
/// ([`Outbox::drain_pending`]) until `stop` resolves, pausing `idle`
/// whenever a pass delivered nothing. Effects that failed stay pending
/// and are tried again in the next pass, except those that failed for
/// good, whose rows are parked and left alone (`PendingReport::parked`)
/// until an operator retries or skips them; `on_pass` sees each pass's
/// report (to log failures and parked rows). Returns the first error of
/// the outbox itself (its table).
pub async fn run_until(
    outbox: &Outbox,
    deliver: &dyn Deliver,
    idle: Duration,
    mut on_pass: impl FnMut(&PendingReport),
    stop: impl Future<Output = ()>,
) -> Result<(), Error> {
    let passes = async {
        loop {
            let report = outbox.drain_pending(deliver).await?;
            on_pass(&report);
            if report.delivered == 0 {
                tokio::time::sleep(idle).await;
            }
        }
    };
    tokio::select! {
        failed = passes => failed,
        () = stop => Ok(()),
    }
}
