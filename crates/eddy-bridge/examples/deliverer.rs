//! Delivers the freight example's notices from its outbox (an embedded
//! table in a SQLite file) into a durable stream per shipment
//! (`freight/notices/<shipmentId>`, a SQLite stream store), forever,
//! printing `delivered` after each notice the store took. The bridge's
//! crash test kills it at random moments and starts it again.
//!
//!     cargo run -p eddy-bridge --example deliverer -- TABLE_FILE STREAMS_DIR

#[path = "../../eddy-dynamo-cli/examples/freight/model.rs"]
#[allow(dead_code)]
mod model;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use eddy_bridge::{Route, StreamDelivery};
use eddy_dynamo::{BoxError, Deliver, Effect, EmbeddedTable};
use eddy_streams::{SqliteStorage, StreamPath};
use futures::future::BoxFuture;

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
            delivery.deliver_effect(&effect).await?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "delivered")?;
            out.flush()?;
            Ok(())
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (Some(table_file), Some(streams)) = (args.next(), args.next()) else {
        return Err("usage: deliverer TABLE_FILE STREAMS_DIR".into());
    };
    let table = EmbeddedTable::open_sqlite(&table_file, model::schema("freight"))?;
    let freight = model::Freight::new(Arc::new(table))?;
    // A killed deliverer's claims expire soon, so the next one goes on.
    let outbox = freight.outbox()?.claim_for(Duration::from_millis(300));
    let store = Arc::new(SqliteStorage::open(&streams)?);
    let deliver = Announce(StreamDelivery::new(store, Route::by(route), "shipments"));
    let report = |pass: &eddy_dynamo::PendingReport| {
        for failed in &pass.undelivered {
            eprintln!("undelivered: {}", failed.error);
        }
    };
    let forever = std::future::pending();
    eddy_bridge::run_until(
        &outbox,
        &deliver,
        Duration::from_millis(20),
        report,
        forever,
    )
    .await?;
    Ok(())
}
