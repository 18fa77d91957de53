//! Declarations and bindings: the rules checked before anything runs. (The
//! rules the compiler checks — commit fit, output and item types — are
//! `compile_fail` doctests in the crate.)

use eddy_projection::{Commit, Declare, Projection, Step};
use eddy_streams::{JsonStream, StateStream};
use serde::{Deserialize, Serialize};

use crate::support::{orders, total_of, totals, Order, Total};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Workspace {
    workspace_id: String,
}

fn ws(id: &str) -> Workspace {
    Workspace {
        workspace_id: id.into(),
    }
}

fn facts() -> JsonStream<Order> {
    JsonStream::new("Shop/Facts", "facts/:workspaceId").expect("route")
}

fn ws_totals() -> JsonStream<Total> {
    JsonStream::new("Shop/Totals", "totals/:workspaceId").expect("route")
}

/// An `emit` of `P` from `input` to `output`, one total per order.
fn emit_totals<P: eddy_projection::Params>(
    id: &str,
    input: &JsonStream<Order>,
    output: &JsonStream<Total>,
) -> eddy_projection::Result<Projection<P, ()>> {
    let declare = Declare::<P>::new(id);
    let input = declare.input("input", input);
    let output = declare.output("output", output);
    declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(output, total_of(entry.item))
        })
        .build()
}

/// A `fold` of `P` summing the amounts of `inputs`.
fn sum_of<P: eddy_projection::Params>(
    id: &str,
    inputs: &[&JsonStream<Order>],
) -> eddy_projection::Result<Projection<P, f64>> {
    let declare = Declare::<P>::new(id);
    let handles: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, stream)| declare.input(&format!("input-{i}"), stream))
        .collect();
    let mut fold = declare.fold(0.0);
    for handle in handles {
        fold = fold.on(handle, |sum, e, _| sum + e.item.amount);
    }
    fold.build()
}

fn code<T: std::fmt::Debug>(result: eddy_projection::Result<T>) -> &'static str {
    result.expect_err("an error").code()
}

#[test]
fn at_renders_every_route_and_parse_reads_the_params() {
    let projection = emit_totals::<Workspace>("order-totals", &facts(), &ws_totals()).expect("ok");
    let bound = projection.at(ws("ws-42")).expect("bind");
    assert_eq!(bound.input_paths()[0].as_str(), "facts/ws-42");
    assert_eq!(bound.output_paths()[0].as_str(), "totals/ws-42");
    assert_eq!(
        bound.checkpoint_path().as_str(),
        "__eddy/checkpoints/order-totals/1/workspaceId=ws-42"
    );
    let params = projection.parse("facts/ws-42").expect("parse");
    assert_eq!(params.workspace_id, "ws-42");
    assert_eq!(
        code(projection.parse("totals/ws-42")),
        "load/invalid-options"
    );
}

#[test]
fn streams_with_fewer_params_are_shared_by_every_binding() {
    let projection = sum_of::<Workspace>("shared", &[&orders()]).expect("declare");
    let a = projection.at(ws("a")).expect("a");
    let b = projection.at(ws("b")).expect("b");
    assert_eq!(a.input_paths(), b.input_paths());
    assert_ne!(a.checkpoint_path(), b.checkpoint_path());
}

#[test]
fn a_route_param_the_projection_lacks_is_refused() {
    assert_eq!(
        code(sum_of::<()>("bad", &[&facts()])),
        "load/invalid-options"
    );
    assert_eq!(
        code(emit_totals::<()>("bad", &orders(), &ws_totals())),
        "load/invalid-options",
        "an output's route too"
    );
}

#[test]
fn every_input_needs_exactly_one_handler_of_this_declaration() {
    let declare = Declare::<()>::new("x");
    let a = declare.input("a", &orders());
    declare.input("b", &orders());
    let missing = declare.fold(0.0).on(a, |s, _, _| s).build();
    assert_eq!(code(missing), "load/invalid-options");

    let declare = Declare::<()>::new("x");
    let a = declare.input("a", &orders());
    let twice = declare
        .fold(0.0)
        .on(a, |s, _, _| s)
        .on(a, |s, _, _| s)
        .build();
    assert_eq!(code(twice), "load/invalid-options");

    let other = Declare::<()>::new("other");
    let foreign = other.input("a", &orders());
    let declare = Declare::<()>::new("x");
    declare.input("a", &orders());
    let mixed = declare.fold(0.0).on(foreign, |s, _, _| s).build();
    assert_eq!(code(mixed), "load/invalid-options");
}

#[test]
fn constructors_check_inputs_and_outputs() {
    let no_inputs = Declare::<()>::new("x").fold(0.0).build();
    assert_eq!(code(no_inputs), "load/invalid-options");

    let declare = Declare::<()>::new("x");
    let input = declare.input("orders", &orders());
    let emit_without_outputs = declare
        .emit(Commit::producer())
        .on(input, |_, _, _| ())
        .build();
    assert_eq!(code(emit_without_outputs), "load/invalid-options");

    let declare = Declare::<()>::new("x");
    let input = declare.input("orders", &orders());
    declare.output("totals", &totals());
    let fold_with_outputs = declare.fold(0.0).on(input, |s, _, _| s).build();
    assert_eq!(code(fold_with_outputs), "load/invalid-options");

    let declare = Declare::<()>::new("x");
    declare.input("orders", &orders());
    let process_ok = declare.process(Commit::at_least_once(), |batch, _| {
        Step::result(if batch.is_empty() {
            Err("empty")
        } else {
            Ok(())
        })
    });
    assert!(process_ok.is_ok());
}

#[test]
fn names_are_unique_and_streams_distinct() {
    let declare = Declare::<()>::new("x");
    let input = declare.input("same", &orders());
    declare.output("same", &totals());
    let same_names = declare
        .emit(Commit::producer())
        .on(input, |_, _, _| ())
        .build();
    assert_eq!(code(same_names), "load/invalid-options");

    let declare = Declare::<()>::new("x");
    let input = declare.input("orders", &orders());
    declare.output("a", &totals());
    declare.output("b", &totals());
    let same_outputs = declare
        .emit(Commit::producer())
        .on(input, |_, _, _| ())
        .build();
    assert_eq!(code(same_outputs), "load/invalid-options");

    let as_input = JsonStream::<Total>::new("Shop/Again", "orders").expect("route");
    assert_eq!(
        code(emit_totals::<()>("x", &orders(), &as_input)),
        "load/invalid-options"
    );
}

#[test]
fn a_collection_the_state_stream_lacks_is_refused() {
    #[derive(Serialize, Deserialize)]
    struct Row {
        id: String,
    }
    let board = StateStream::new("Test/Board", "board")
        .expect("route")
        .collection::<Row>("row", "id");
    let declare = Declare::<()>::new("x");
    let input = declare.input("orders", &orders());
    let output = declare.state_output("board", &board);
    let unknown = declare.collection::<Row>(output, "nope");
    let projection = declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.remove(unknown, entry.item.order_id.clone())
        })
        .build();
    assert_eq!(code(projection), "load/invalid-options");
}

#[test]
fn map_params_are_checked_when_bound() {
    let projection = sum_of::<serde_json::Value>("dynamic", &[&facts()]).expect("declare");
    assert_eq!(
        code(projection.at(serde_json::json!({}))),
        "load/invalid-options"
    );
    assert!(projection
        .at(serde_json::json!({ "workspaceId": "w" }))
        .is_ok());
}

#[test]
fn parse_tries_the_inputs_in_declaration_order() {
    // "logs/facts" matches both routes, with different captures.
    let logs = JsonStream::<Order>::new("Shop/Logs", "logs/:workspaceId").expect("route");
    let facts_first =
        JsonStream::<Order>::new("Shop/ByWorkspace", ":workspaceId/facts").expect("route");
    let logs_then_facts = sum_of::<Workspace>("ordered", &[&logs, &facts_first]).expect("ok");
    let parsed = |projection: &Projection<Workspace, f64>, path| {
        projection.parse(path).expect("parse").workspace_id
    };
    assert_eq!(parsed(&logs_then_facts, "logs/facts"), "facts");
    assert_eq!(
        logs_then_facts.parse_subset("logs/facts").expect("subset")["workspaceId"],
        "facts"
    );
    let facts_then_logs = sum_of::<Workspace>("ordered", &[&facts_first, &logs]).expect("ok");
    assert_eq!(parsed(&facts_then_logs, "logs/facts"), "logs");
    assert_eq!(parsed(&facts_then_logs, "logs/w1"), "w1");
}

#[test]
fn an_output_that_resolves_to_an_input_stream_is_refused_when_bound() {
    // Different templates, the same stream for one binding.
    let fixed = JsonStream::<Total>::new("Shop/Fixed", "facts/ws-42").expect("route");
    let projection = emit_totals::<Workspace>("collide", &facts(), &fixed).expect("declare");
    assert_eq!(code(projection.at(ws("ws-42"))), "load/invalid-options");
    assert!(projection.at(ws("ws-1")).is_ok());

    let other = JsonStream::<Total>::new("Shop/Other", "totals/:workspaceId").expect("route");
    let fixed_output = JsonStream::<Total>::new("Shop/Fixed", "totals/ws-42").expect("route");
    let declare = Declare::<Workspace>::new("collide-outputs");
    let input = declare.input("facts", &facts());
    declare.output("a", &other);
    declare.output("b", &fixed_output);
    let two_outputs = declare
        .emit(Commit::producer())
        .on(input, |_, _, _| ())
        .build()
        .expect("declare");
    assert_eq!(code(two_outputs.at(ws("ws-42"))), "load/invalid-options");
}
