//! Declarations and bindings: the rules checked before anything runs.

use eddy_projection::{each, Commit, Declare, Emits, Projection, Step};
use eddy_streams::JsonStream;
use serde::{Deserialize, Serialize};

use crate::support::{numbers, order, orders, totals, Order, Total};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Workspace {
    workspace_id: String,
}

fn facts() -> JsonStream<Order> {
    JsonStream::new("Shop/Facts", "facts/:workspaceId").expect("route")
}

fn ws_totals() -> JsonStream<Total> {
    JsonStream::new("Shop/Totals", "totals/:workspaceId").expect("route")
}

fn by_workspace() -> Projection<Workspace, Order, ()> {
    Declare::<Workspace, Order>::new("order-totals")
        .input("facts", &facts())
        .output("output", &ws_totals())
        .emit(Commit::producer(), |entry, _| {
            Emits::new().json(
                "output",
                [Total {
                    order_id: entry.item.order_id.clone(),
                    total: entry.item.amount,
                }],
            )
        })
        .expect("declare")
}

fn code<T: std::fmt::Debug>(result: eddy_projection::Result<T>) -> &'static str {
    result.expect_err("an error").code()
}

#[test]
fn at_renders_every_route_and_parse_reads_the_params() {
    let projection = by_workspace();
    let bound = projection
        .at(Workspace {
            workspace_id: "ws-42".into(),
        })
        .expect("bind");
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
    let projection = Declare::<Workspace, Order>::new("shared")
        .input("orders", &orders())
        .fold(0.0, |sum, e, _| sum + e.item.amount)
        .expect("declare");
    let a = projection
        .at(Workspace {
            workspace_id: "a".into(),
        })
        .expect("a");
    let b = projection
        .at(Workspace {
            workspace_id: "b".into(),
        })
        .expect("b");
    assert_eq!(a.input_paths(), b.input_paths());
    assert_ne!(a.checkpoint_path(), b.checkpoint_path());
}

#[test]
fn a_route_param_the_projection_lacks_is_refused() {
    let result = Declare::<(), Order>::new("bad")
        .input("facts", &facts())
        .fold(0.0, |sum, e, _| sum + e.item.amount);
    assert_eq!(code(result), "load/invalid-options");
}

#[test]
fn wrong_constructor_and_commit_pairs_are_refused_when_built() {
    let emit_with_checkpoint = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .output("totals", &totals())
        .emit(Commit::checkpoint(), |_, _| Emits::new());
    assert_eq!(code(emit_with_checkpoint), "load/invalid-options");

    let process_with_producer = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .process(Commit::producer(), each(|_, _| ()));
    assert_eq!(code(process_with_producer), "load/invalid-options");

    let fold_with_producer = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .fold_with(Commit::producer(), 0.0, |s, _, _| s);
    assert_eq!(code(fold_with_producer), "load/invalid-options");

    let emit_without_outputs = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .emit(Commit::producer(), |_, _| Emits::new());
    assert_eq!(code(emit_without_outputs), "load/invalid-options");

    let no_inputs = Declare::<(), Order>::new("x").fold(0.0, |s, _, _| s);
    assert_eq!(code(no_inputs), "load/invalid-options");

    let process_ok = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .process(
            Commit::at_least_once(),
            |batch: &eddy_projection::Batch<Order>, _: &eddy_projection::Unit<()>| {
                Step::result(if batch.is_empty() {
                    Err("empty")
                } else {
                    Ok(())
                })
            },
        );
    assert!(process_ok.is_ok());
}

#[test]
fn two_outputs_or_an_output_and_an_input_cannot_name_one_stream() {
    let same_outputs = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .output("a", &totals())
        .output("b", &totals())
        .emit(Commit::producer(), |_, _| Emits::new());
    assert_eq!(code(same_outputs), "load/invalid-options");

    let as_input = JsonStream::<Order>::new("Shop/Again", "orders").expect("route");
    let output_is_input = Declare::<(), Order>::new("x")
        .input("orders", &orders())
        .output("again", &as_input)
        .emit(Commit::producer(), |_, _| Emits::new());
    assert_eq!(code(output_is_input), "load/invalid-options");
}

#[test]
fn map_params_are_checked_when_bound() {
    let projection = Declare::<serde_json::Value, Order>::new("dynamic")
        .input("facts", &facts())
        .fold(0.0, |sum, e, _| sum + e.item.amount)
        .expect("declare");
    assert_eq!(
        code(projection.at(serde_json::json!({}))),
        "load/invalid-options"
    );
    assert!(projection
        .at(serde_json::json!({ "workspaceId": "w" }))
        .is_ok());
    let _ = (order(1, 1.0), numbers());
}

#[test]
fn parse_tries_the_inputs_in_declaration_order() {
    // "logs/facts" matches both routes, with different captures.
    let logs = JsonStream::<Order>::new("Shop/Logs", "logs/:workspaceId").expect("route");
    let facts_first =
        JsonStream::<Order>::new("Shop/ByWorkspace", ":workspaceId/facts").expect("route");
    let declare = |first: &JsonStream<Order>, second: &JsonStream<Order>| {
        Declare::<Workspace, Order>::new("ordered")
            .input("first", first)
            .input("second", second)
            .fold(0.0, |sum, e, _| sum + e.item.amount)
            .expect("declare")
    };
    let logs_then_facts = declare(&logs, &facts_first);
    assert_eq!(
        logs_then_facts
            .parse("logs/facts")
            .expect("parse")
            .workspace_id,
        "facts"
    );
    assert_eq!(
        logs_then_facts.parse_subset("logs/facts").expect("subset")["workspaceId"],
        "facts"
    );
    let facts_then_logs = declare(&facts_first, &logs);
    assert_eq!(
        facts_then_logs
            .parse("logs/facts")
            .expect("parse")
            .workspace_id,
        "logs"
    );
    assert_eq!(
        facts_then_logs
            .parse("logs/w1")
            .expect("second route")
            .workspace_id,
        "w1"
    );
}

#[test]
fn an_output_route_param_the_projection_lacks_is_refused() {
    let result = Declare::<(), Order>::new("bad")
        .input("orders", &orders())
        .output("totals", &ws_totals())
        .emit(Commit::producer(), |_, _| Emits::new());
    assert_eq!(code(result), "load/invalid-options");
}

#[test]
fn an_output_that_resolves_to_an_input_stream_is_refused_when_bound() {
    // Different templates, the same stream for one binding.
    let fixed = JsonStream::<Total>::new("Shop/Fixed", "facts/ws-42").expect("route");
    let projection = Declare::<Workspace, Order>::new("collide")
        .input("facts", &facts())
        .output("fixed", &fixed)
        .emit(Commit::producer(), |_, _| Emits::new())
        .expect("declare");
    assert_eq!(
        code(projection.at(Workspace {
            workspace_id: "ws-42".into()
        })),
        "load/invalid-options"
    );
    assert!(projection
        .at(Workspace {
            workspace_id: "ws-1".into()
        })
        .is_ok());

    let other = JsonStream::<Total>::new("Shop/Other", "totals/:workspaceId").expect("route");
    let fixed_output = JsonStream::<Total>::new("Shop/Fixed", "totals/ws-42").expect("route");
    let two_outputs = Declare::<Workspace, Order>::new("collide-outputs")
        .input("facts", &facts())
        .output("a", &other)
        .output("b", &fixed_output)
        .emit(Commit::producer(), |_, _| Emits::new())
        .expect("declare");
    assert_eq!(
        code(two_outputs.at(Workspace {
            workspace_id: "ws-42".into()
        })),
        "load/invalid-options"
    );
}
