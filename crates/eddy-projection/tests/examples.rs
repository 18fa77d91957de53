//! Every example runs and checks its own outcome.

#[path = "../examples/amounts.rs"]
mod amounts;
#[path = "../examples/enrich.rs"]
mod enrich;
#[path = "../examples/order_rows.rs"]
mod order_rows;
#[path = "../examples/order_totals.rs"]
mod order_totals;
#[path = "../examples/per_workspace.rs"]
mod per_workspace;
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
