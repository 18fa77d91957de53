//! The deliverer's work, shared with the bridge's crash test (which runs
//! it as its deliverer process): the freight notices from the outbox in
//! `table_file` into a stream per shipment (`freight/notices/<id>`) of the
//! SQLite stream store in `streams`, forever, printing `delivered` after
//! each notice the store took.

use std::sync::Arc;
use std::time::Duration;

use eddy_bridge::{Route, StreamDelivery};
use eddy_dynamo::{BoxError, Deliver, Effect, EmbeddedTable, PendingReport};
use eddy_streams::{SqliteStorage, StreamPath};
use futures::future::BoxFuture;

use crate::model;

/// The stream of a shipment's notices.
fn route(effect: &Effect) -> Result<StreamPath, BoxError> {
    let notice: model::ShipmentNotice = effect.decode()?;
    Ok(StreamPath::new(format!(
        "freight/notices/{}",
        notice.shipment_id
    ))?)
}

/// Says `delivered` once the store took a notice.
struct Announce(StreamDelivery);

impl Deliver for Announce {
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>> {
        let delivery = self.0.clone();
        Box::pin(async move {
            // Through the bridge's own `Deliver`, so that a permanent
            // failure parks the row.
            delivery.deliver(effect).await?;
            println!("delivered");
            Ok(())
        })
    }

    // Keeps `eddy status` told of parked rows.
    fn pass_done<'a>(&'a self, report: &'a PendingReport) -> BoxFuture<'a, ()> {
        self.0.pass_done(report)
    }
}

/// Delivers until the process ends; returns only on a failure of the
/// outbox's table or of opening the stores.
pub async fn run(table_file: &str, streams: &str) -> Result<(), BoxError> {
    let table = EmbeddedTable::open_sqlite(table_file, model::schema("freight"))?;
    let freight = model::Freight::new(Arc::new(table))?;
    // A killed deliverer's claims expire soon, so the next one goes on.
    let outbox = freight.outbox()?.claim_for(Duration::from_millis(300));
    let store = Arc::new(SqliteStorage::open(streams)?);
    let deliver = Announce(StreamDelivery::new(store, Route::by(route), "shipments")?);
    let report = |pass: &eddy_dynamo::PendingReport| {
        for failed in &pass.undelivered {
            eprintln!("undelivered: {}", failed.error);
        }
        for parked in &pass.parked {
            eprintln!(
                "parked: {}: {}",
                parked.failure.code, parked.failure.message
            );
        }
    };
    let forever = std::future::pending();
    eddy_bridge::run_until(
        &outbox,
        &deliver,
        Duration::from_millis(10),
        report,
        forever,
    )
    .await?;
    Ok(())
}
