//! Per-binding metrics (issue 14 §2): runs move a binding's counters and
//! lag gauge by exactly what they committed, failed and retried, and the
//! page they render to parses as the Prometheus text format.

use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{Commit, Declare, FollowOptions, Host, Retry, RunOptions, Step};
use eddy_streams::{MemoryStorage, Storage};
use futures::StreamExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use prometheus_parse::{Scrape, Value};

use crate::support::{numbers, Faulty, Op, When};

fn scrape(handle: &PrometheusHandle) -> Scrape {
    let page = handle.render();
    Scrape::parse(page.lines().map(|line| Ok(line.to_owned()))).expect("a Prometheus text page")
}

/// The series `name` of projection `projection` (binding `_`), with
/// `input` for the lag; 0 when absent.
fn value(scrape: &Scrape, name: &str, projection: &str) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| s.labels.get("projection") == Some(projection))
        .map(|s| {
            assert_eq!(s.labels.get("binding"), Some("_"), "{s:?}");
            match &s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
                other => panic!("{name} is not a counter or gauge: {other:?}"),
            }
        })
        .sum()
}

/// Units, items, failures, retries and lag (messages) of `projection`.
fn binding(handle: &PrometheusHandle, projection: &str) -> [f64; 5] {
    let scrape = scrape(handle);
    [
        "eddy_projection_units_total",
        "eddy_projection_items_total",
        "eddy_projection_failures_total",
        "eddy_projection_retries_total",
        "eddy_projection_lag_messages",
    ]
    .map(|name| value(&scrape, name, projection))
}

#[test]
fn a_bindings_counters_and_lag_follow_its_runs() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    // A current-thread runtime keeps every task on this thread, where the
    // local recorder is installed.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    metrics::with_local_recorder(&recorder, || {
        eddy_projection::describe_metrics();
        runtime.block_on(runs(&handle));
    });
    let scrape = scrape(&handle);
    for family in [
        "eddy_projection_units_total",
        "eddy_projection_items_total",
        "eddy_projection_failures_total",
        "eddy_projection_retries_total",
        "eddy_projection_lag_messages",
    ] {
        let help = scrape.docs.get(family).map_or("", String::as_str);
        assert!(help.len() > 20, "no help text for {family}");
    }
}

async fn runs(handle: &PrometheusHandle) {
    let faulty = Arc::new(Faulty::new(Arc::new(MemoryStorage::new())));
    let store: Arc<dyn Storage> = faulty.clone();
    let numbers = numbers();
    numbers.create(store.as_ref(), &()).await.expect("create");
    numbers
        .append(store.as_ref(), &(), &[1, 2, 3, 4, 5])
        .await
        .expect("append");
    let host = Host::new(Arc::clone(&store));

    let declare = Declare::<()>::new("sum");
    let input = declare.input("numbers", &numbers);
    let sum = declare
        .fold(0_i64)
        .on(input, |sum, entry, _| sum + entry.item)
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    let pairs = |limit| RunOptions {
        limit,
        ..RunOptions::default().with_unit_size(2)
    };
    host.run(&sum, pairs(Some(1))).await.expect("run");
    assert_eq!(binding(handle, "sum"), [1.0, 2.0, 0.0, 0.0, 3.0]);
    host.run(&sum, pairs(None)).await.expect("run");
    assert_eq!(binding(handle, "sum"), [3.0, 5.0, 0.0, 0.0, 0.0]);

    let declare = Declare::<()>::new("mailer");
    let input = declare.input("numbers", &numbers);
    let mailer = declare
        .process_each(Commit::at_least_once())
        .on(input, |_, _| Step::<()>::fail("the mail server refused"))
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    let failed = host.run(&mailer, RunOptions::default()).await;
    assert_eq!(
        failed.expect_err("the handler fails").code(),
        "handler/failed"
    );
    assert_eq!(binding(handle, "mailer"), [0.0, 0.0, 1.0, 0.0, 5.0]);
    // The failure counts under its stable code.
    let coded = scrape(handle).samples.into_iter().find(|s| {
        s.metric == "eddy_projection_failures_total" && s.labels.get("projection") == Some("mailer")
    });
    assert_eq!(
        coded.and_then(|s| s.labels.get("code").map(str::to_owned)),
        Some("handler/failed".to_owned())
    );

    // One read fails with a storage failure: the follower retries once.
    let declare = Declare::<()>::new("count");
    let input = declare.input("numbers", &numbers);
    let count = declare
        .fold(0_u64)
        .on(input, |count, _, _| count + 1)
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    faulty.fail_nth(Some(Op::Read), 0, When::Before);
    let options = FollowOptions {
        retry: Some(Retry::exponential(
            Duration::from_millis(1),
            Duration::from_millis(1),
        )),
        ..FollowOptions::default()
    };
    let first = Box::pin(host.follow(&count, options)).next().await;
    let progress = first.expect("a cycle").expect("caught up after a retry");
    assert_eq!((progress.units, progress.items), (1, 5));
    assert_eq!(binding(handle, "count"), [1.0, 5.0, 1.0, 1.0, 0.0]);
}
