//! Delivers the freight example's notices from its outbox (an embedded
//! table in a SQLite file) into a durable stream per shipment
//! (`freight/notices/<shipmentId>`, a SQLite stream store), exactly once,
//! forever; it prints `delivered` after each notice the store took. Kill
//! it at any moment and start it again: nothing is lost or doubled (the
//! bridge's crash test does just that).
//!
//!     cargo run -p eddy-bridge --example deliverer -- TABLE_FILE STREAMS_DIR

#[path = "../../../eddy-dynamo-cli/examples/freight/model.rs"]
#[allow(dead_code)]
mod model;
mod notices;

#[tokio::main]
async fn main() -> Result<(), eddy_dynamo::BoxError> {
    let mut args = std::env::args().skip(1);
    let (Some(table_file), Some(streams)) = (args.next(), args.next()) else {
        return Err("usage: deliverer TABLE_FILE STREAMS_DIR".into());
    };
    notices::run(&table_file, &streams).await
}
