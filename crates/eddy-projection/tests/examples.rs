//! Every example runs and checks its own outcome.

#[path = "../examples/amounts.rs"]
mod amounts;
#[path = "../examples/emit_served.rs"]
mod emit_served;
#[path = "../examples/enrich.rs"]
mod enrich;
#[path = "../examples/fold_on_sqlite.rs"]
mod fold_on_sqlite;
#[path = "../examples/order_rows.rs"]
mod order_rows;
#[path = "../examples/order_totals.rs"]
mod order_totals;
#[path = "../examples/per_workspace.rs"]
mod per_workspace;
#[path = "../examples/rows_followed.rs"]
mod rows_followed;
#[path = "../examples/tracker.rs"]
mod tracker;

#[test]
fn order_totals_runs() {
    order_totals::main().expect("order totals");
}

#[test]
fn amounts_runs() {
    amounts::main().expect("amounts");
}

#[test]
fn tracker_runs() {
    tracker::main().expect("tracker");
}

#[test]
fn per_workspace_runs() {
    per_workspace::main().expect("per workspace");
}

#[test]
fn enrich_runs() {
    enrich::main().expect("enrich");
}

/// The spec's order-rows projection on SQLite: `Commit::transaction`
/// with rows in the application's own table.
#[test]
fn order_rows_runs() {
    order_rows::main().expect("order rows");
}

/// Issue 26, the three common cases, each under 40 lines: a fold to a
/// typed state followed on SQLite ...
#[test]
fn fold_on_sqlite_runs() {
    fold_on_sqlite::main().expect("fold on sqlite");
}

/// ... an emit with the producer commit through `RemoteStorage` against
/// an in-process `eddy serve` ...
#[test]
fn emit_served_runs() {
    emit_served::main().expect("emit served");
}

/// ... and a `Commit::transaction` row table on SQLite followed live.
#[test]
fn rows_followed_runs() {
    rows_followed::main().expect("rows followed");
}
