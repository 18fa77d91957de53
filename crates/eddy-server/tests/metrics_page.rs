//! The `/metrics` page (issue 14 §2): it parses as the Prometheus text
//! format, every family has help text, and the counters move by exactly
//! what known traffic should make them move.

use std::sync::Arc;

use eddy_server::{Metrics, Server, ServerConfig};
use eddy_streams::MemoryStorage;
use prometheus_parse::{Scrape, Value};

/// The page of `metrics`, parsed.
pub(crate) fn parse(page: &str) -> Scrape {
    Scrape::parse(page.lines().map(|line| Ok(line.to_owned()))).expect("a Prometheus text page")
}

/// The value of the series `name` whose labels include `labels` (0 when
/// absent); for a histogram, its count of observations.
pub(crate) fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => panic!("{name} is a summary, not a histogram"),
        })
        .sum()
}

/// The current value of `name` on `metrics`' page.
pub(crate) fn current(metrics: &Metrics, name: &str) -> f64 {
    value(&parse(&metrics.render()), name, &[])
}

async fn scrape(client: &reqwest::Client, base: &str) -> Scrape {
    parse(&crate::support::metrics_page(client, base).await)
}

#[tokio::test]
async fn every_family_has_help_text_and_a_prometheus_type() {
    let page = Metrics::new().render();
    let scrape = parse(&page);
    let families: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .collect();
    assert!(families.len() >= 12, "{page}");
    for family in families {
        assert!(family.starts_with("eddy_"), "{family}");
        let help = scrape.docs.get(family).map(String::as_str).unwrap_or("");
        assert!(help.len() > 10, "no help text for {family}: {page}");
    }
}

#[tokio::test]
async fn counters_move_by_the_traffic_served() {
    let server = Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::new(MemoryStorage::new()),
        ServerConfig::default(),
    )
    .await
    .expect("bind")
    .spawn();
    let base = server.url();
    let http = reqwest::Client::new();
    let before = scrape(&http, &base).await;

    let created = http
        .put(format!("{base}/orders"))
        .header("content-type", "text/plain")
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    for _ in 0..3 {
        let appended = http
            .post(format!("{base}/orders"))
            .header("content-type", "text/plain")
            .body("hello")
            .send()
            .await
            .expect("append");
        assert_eq!(appended.status(), 204);
    }
    for _ in 0..2 {
        // The same producer write twice: the second is a duplicate.
        let produced = http
            .post(format!("{base}/orders"))
            .header("content-type", "text/plain")
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", "0")
            .body("once")
            .send()
            .await
            .expect("producer append");
        assert!(produced.status().is_success(), "{}", produced.status());
    }
    let read = http
        .get(format!("{base}/orders?offset=-1"))
        .send()
        .await
        .expect("read");
    assert_eq!(read.status(), 200);
    let missing = http
        .get(format!("{base}/nowhere?offset=-1"))
        .send()
        .await
        .expect("read");
    assert_eq!(missing.status(), 404);

    let after = scrape(&http, &base).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    assert_eq!(moved("eddy_appends_total", &[]), 4.0);
    assert_eq!(moved("eddy_append_bytes_total", &[]), 19.0);
    assert_eq!(moved("eddy_duplicate_appends_total", &[]), 1.0);
    assert_eq!(moved("eddy_reads_total", &[]), 1.0);
    assert_eq!(moved("eddy_errors_total", &[]), 1.0);
    let requests = "eddy_http_requests_total";
    assert_eq!(
        moved(requests, &[("route", "create"), ("status", "201")]),
        1.0
    );
    assert_eq!(
        moved(requests, &[("route", "append"), ("status", "204")]),
        4.0
    );
    assert_eq!(
        moved(requests, &[("route", "append"), ("status", "200")]),
        1.0
    );
    assert_eq!(
        moved(requests, &[("route", "read"), ("status", "200")]),
        1.0,
        "the read from -1 is answered with its data"
    );
    assert_eq!(
        moved(requests, &[("route", "read"), ("status", "307")]),
        0.0
    );
    assert_eq!(
        moved(requests, &[("route", "read"), ("status", "404")]),
        1.0
    );
    // The first scrape itself is the one metrics request answered so far.
    assert_eq!(moved(requests, &[("route", "metrics")]), 1.0);
    let latency = "eddy_http_request_duration_seconds";
    assert_eq!(moved(latency, &[("route", "append")]), 5.0);
    assert_eq!(moved(latency, &[("route", "read")]), 2.0);
    assert_eq!(value(&after, "eddy_live_readers", &[]), 0.0);
    assert_eq!(value(&after, "eddy_requests_in_flight", &[]), 1.0);
    server.stop().await.expect("stop");
}
