//! The ordered outbox: effects committed with their row, delivered in
//! order per row by claim → deliver → delete, at least once; claims that
//! expire; `drain_pending` over the sparse index. Every case runs on
//! memory, SQLite and moto, with the items in the row's partition and in
//! a second table of the same database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use eddy_dynamo::{
    n, s, BoxError, Effect, EmbeddedTable, Entity, Item, Outbox, PendingEffect, Put, Query,
    QueryPage, StreamId, Table, TableError, TableWrite, TransactWriteItem,
};
use futures::future::BoxFuture;

use crate::common::{key, summaries, OrderSummary};
use crate::pair_tests;
use crate::tables::Pair;

/// A clock the test moves: epoch milliseconds.
#[derive(Clone, Default)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn advance_secs(&self, secs: u64) {
        self.0.fetch_add(secs * 1000, Ordering::SeqCst);
    }
}

/// What reached the consumer, in the order deliveries completed.
#[derive(Clone, Default)]
struct Consumer(Arc<Mutex<Vec<(String, u64)>>>);

impl Consumer {
    fn record(&self, effect: &Effect) {
        let order = effect
            .stream_id
            .get("orderId")
            .unwrap_or_default()
            .to_owned();
        self.0.lock().unwrap().push((order, effect.version));
    }
    fn seen(&self) -> Vec<(String, u64)> {
        self.0.lock().unwrap().clone()
    }
    /// A deliver that records every effect.
    fn deliver(&self) -> impl Fn(Effect) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync {
        let consumer = self.clone();
        move |effect| {
            consumer.record(&effect);
            Box::pin(async { Ok(()) })
        }
    }
}

fn summary(order_id: &str, revision: u64) -> OrderSummary {
    OrderSummary {
        order_id: order_id.into(),
        customer: "ada".into(),
        lines: u32::try_from(revision).unwrap(),
        total_cents: 0,
        cancelled: false,
    }
}

fn effect(order_id: &str, version: u64) -> PendingEffect {
    PendingEffect {
        source: "order".into(),
        stream_id: StreamId::new([("orderId", order_id)]),
        version,
        payload: serde_dynamo::to_attribute_value(serde_json::json!({ "notice": version }))
            .unwrap(),
    }
}

/// The two places effect items can live.
#[derive(Clone, Copy, Debug)]
enum Place {
    RowPartition,
    SecondTable,
}

/// The read model and its outbox, with the sparse index `drain_pending`
/// reads (gsi1 in the row's table, `pending` in the second one).
fn outbox(p: &Pair, place: Place, clock: &TestClock) -> (Entity<OrderSummary>, Outbox) {
    let rows = summaries(&p.first);
    let outbox = placed(p, place, &rows);
    let clock = clock.clone();
    (rows, outbox.with_clock(move || clock.now()))
}

/// The outbox of `rows` in `place`, with its sparse index.
fn placed<M: serde::Serialize + serde::de::DeserializeOwned>(
    p: &Pair,
    place: Place,
    rows: &Entity<M>,
) -> Outbox {
    let outbox = Outbox::new(rows).unwrap();
    match place {
        Place::RowPartition => outbox.with_index("gsi1").unwrap(),
        Place::SecondTable => outbox
            .in_table(p.second.clone())
            .unwrap()
            .with_index("pending")
            .unwrap(),
    }
}

/// Writes row `order_id` at `revision` with effects for `versions`, in one
/// transaction, as the projection's row write does.
async fn write_row(
    p: &Pair,
    rows: &Entity<OrderSummary>,
    outbox: &Outbox,
    order_id: &str,
    revision: u64,
    versions: &[u64],
) {
    let mut item = rows.to_item(&summary(order_id, revision)).unwrap();
    item.insert("revision".into(), n(revision));
    let row_key = rows.key(&key(order_id)).unwrap();
    let effects: Vec<PendingEffect> = versions.iter().map(|v| effect(order_id, *v)).collect();
    let mut writes = vec![TableWrite::new(&rows.table().schema().name, Put::new(item))];
    writes.extend(outbox.commit_items(&row_key, revision, &effects).unwrap());
    p.first.table.transact_write_tables(writes).await.unwrap();
}

fn order(id: &str, versions: &[u64]) -> Vec<(String, u64)> {
    versions.iter().map(|v| (id.to_owned(), *v)).collect()
}

async fn effects_commit_with_their_row_and_drain_in_order_in(p: Pair, place: Place) {
    let clock = TestClock::default();
    let (rows, outbox) = outbox(&p, place, &clock);
    write_row(&p, &rows, &outbox, "o-1", 1, &[1, 2, 3]).await;
    write_row(&p, &rows, &outbox, "o-1", 2, &[4, 5]).await;
    // Entity reads never see effect items.
    assert_eq!(
        rows.get(&key("o-1")).await.unwrap(),
        Some(summary("o-1", 2))
    );
    assert_eq!(
        rows.query(&key("o-1"), None).await.unwrap(),
        vec![summary("o-1", 2)]
    );

    let consumer = Consumer::default();
    let row_key = rows.key(&key("o-1")).unwrap();
    let report = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
    assert_eq!(report.delivered, 5);
    assert_eq!(consumer.seen(), order("o-1", &[1, 2, 3, 4, 5]));
    let again = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
    assert_eq!((again.delivered, again.busy), (0, false));

    // More effects than a transaction holds beside the row: a typed error.
    let too_many: Vec<PendingEffect> = (1..=100).map(|v| effect("o-1", v)).collect();
    let refused = outbox.commit_items(&row_key, 3, &too_many).unwrap_err();
    assert_eq!(refused.code(), "TooManyEffects");
}

async fn effects_commit_with_their_row_and_drain_in_order(p: Pair) {
    effects_commit_with_their_row_and_drain_in_order_in(p, Place::RowPartition).await;
}

async fn effects_in_a_second_table_commit_with_their_row(p: Pair) {
    effects_commit_with_their_row_and_drain_in_order_in(p, Place::SecondTable).await;
}

/// A deliver that announces the effect it got and then never finishes: a
/// drainer that crashes mid-delivery.
fn hanging(
    got: tokio::sync::mpsc::UnboundedSender<u64>,
) -> impl Fn(Effect) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync {
    move |effect| {
        let _ = got.send(effect.version);
        Box::pin(futures::future::pending())
    }
}

/// A crash between the row write and the delivery leaves a claim that
/// expires: the effect is delivered again, then the rest, in order.
async fn a_crash_mid_delivery_redelivers_after_the_claim_expires(p: Pair) {
    for place in [Place::RowPartition, Place::SecondTable] {
        let clock = TestClock::default();
        let (rows, outbox) = outbox(&p, place, &clock);
        let id = format!("o-crash-{place:?}");
        write_row(&p, &rows, &outbox, &id, 1, &[1, 2, 3]).await;
        let row_key = rows.key(&key(&id)).unwrap();

        let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
        let crashed = {
            let (outbox, row_key) = (outbox.clone(), row_key.clone());
            tokio::spawn(async move { outbox.drain(&row_key, &hanging(tx)).await.map(|_| ()) })
        };
        assert_eq!(
            got.recv().await,
            Some(1),
            "the first drainer claimed the head"
        );
        crashed.abort();

        let consumer = Consumer::default();
        let held = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
        assert!(held.busy && held.delivered == 0, "the claim holds for 30 s");
        clock.advance_secs(29);
        assert!(
            outbox
                .drain(&row_key, &consumer.deliver())
                .await
                .unwrap()
                .busy
        );
        clock.advance_secs(1);
        let report = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
        assert_eq!(report.delivered, 3);
        assert_eq!(consumer.seen(), order(&id, &[1, 2, 3]));
    }
}

/// A drainer whose claim expires mid-delivery: a second drainer takes the
/// head over and moves on; the first one's late success deletes only the
/// effect it delivered. The consumer gets every effect in order, with the
/// late duplicate after the later ones, as the spec says.
async fn an_expired_claim_taken_over_keeps_order(p: Pair) {
    for place in [Place::RowPartition, Place::SecondTable] {
        let clock = TestClock::default();
        let (rows, outbox) = outbox(&p, place, &clock);
        let id = format!("o-slow-{place:?}");
        write_row(&p, &rows, &outbox, &id, 1, &[1, 2, 3]).await;
        let row_key = rows.key(&key(&id)).unwrap();
        let consumer = Consumer::default();

        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
        let (finish_tx, finish) = tokio::sync::oneshot::channel::<()>();
        let finish = Arc::new(Mutex::new(Some(finish)));
        let slow = {
            let consumer = consumer.clone();
            move |effect: Effect| -> BoxFuture<'static, Result<(), BoxError>> {
                let _ = started_tx.send(effect.version);
                let (consumer, finish) = (consumer.clone(), finish.lock().unwrap().take());
                Box::pin(async move {
                    if let Some(finish) = finish {
                        let _ = finish.await;
                    }
                    consumer.record(&effect);
                    Ok(())
                })
            }
        };
        let first = {
            let (outbox, row_key) = (outbox.clone(), row_key.clone());
            tokio::spawn(async move { outbox.drain(&row_key, &slow).await.unwrap() })
        };
        assert_eq!(started.recv().await, Some(1));
        clock.advance_secs(31);
        let second = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
        assert_eq!(second.delivered, 3, "the expired claim was taken over");
        finish_tx.send(()).unwrap();
        let first = first.await.unwrap();
        assert_eq!(first.delivered, 1);
        assert_eq!(consumer.seen(), order(&id, &[1, 2, 3, 1]));
        let left = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
        assert_eq!(left.delivered, 0, "the late delete removed nothing else");
    }
}

/// A failed delivery stays at the head and is reported; the claim is given
/// back, so the next drain retries it at once, then goes on in order.
async fn a_failed_delivery_stays_at_the_head(p: Pair) {
    let clock = TestClock::default();
    let (rows, outbox) = outbox(&p, Place::RowPartition, &clock);
    write_row(&p, &rows, &outbox, "o-1", 1, &[1, 2, 3]).await;
    let row_key = rows.key(&key("o-1")).unwrap();
    let consumer = Consumer::default();
    let failing = {
        let consumer = consumer.clone();
        move |effect: Effect| -> BoxFuture<'static, Result<(), BoxError>> {
            if effect.version == 2 {
                return Box::pin(async { Err("the consumer is down".into()) });
            }
            consumer.record(&effect);
            Box::pin(async { Ok(()) })
        }
    };
    let report = outbox.drain(&row_key, &failing).await.unwrap();
    assert_eq!(report.delivered, 1);
    let undelivered = report.undelivered.unwrap();
    assert_eq!(undelivered.effect.version, 2);
    assert_eq!(undelivered.error.to_string(), "the consumer is down");
    let report = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
    assert_eq!(report.delivered, 2);
    assert_eq!(consumer.seen(), order("o-1", &[1, 2, 3]));
}

/// A table whose index queries answer one entry more: an entry for an
/// effect already delivered, as an eventually consistent index can.
struct StaleIndex {
    table: Arc<dyn Table>,
    stale: Item,
}

#[async_trait::async_trait]
impl Table for StaleIndex {
    fn schema(&self) -> &eddy_dynamo::TableSchema {
        self.table.schema()
    }
    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        self.table.get_item(key).await
    }
    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        let on_index = query.index.is_some();
        let mut page = self.table.query(query).await?;
        if on_index {
            page.items.insert(0, self.stale.clone());
        }
        Ok(page)
    }
    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        self.table.transact_write_items(items).await
    }
}

/// `drain_pending` finds every row with pending effects through the sparse
/// index and delivers them in order per row; a stale entry is skipped.
async fn drain_pending_delivers_every_row_and_skips_stale_entries(p: Pair) {
    for place in [Place::RowPartition, Place::SecondTable] {
        let clock = TestClock::default();
        let (rows, outbox) = outbox(&p, place, &clock);
        let ids: Vec<String> = (0..5).map(|i| format!("o-{place:?}-{i}")).collect();
        for id in &ids {
            write_row(&p, &rows, &outbox, id, 1, &[1, 2]).await;
            write_row(&p, &rows, &outbox, id, 2, &[3]).await;
        }
        let index = match place {
            Place::RowPartition => "gsi1",
            Place::SecondTable => "pending",
        };
        let partition = s("shop#v1#OrderSummary#$outbox");
        let entries = outbox
            .table()
            .query(Query::partition(partition).on_index(index))
            .await
            .unwrap();
        assert_eq!(
            entries.items.len(),
            15,
            "every effect item is in the sparse index"
        );
        let stale = entries.items[0].clone();

        let consumer = Consumer::default();
        let report = outbox.drain_pending(&consumer.deliver()).await.unwrap();
        assert_eq!((report.rows, report.delivered, report.stale), (5, 15, 0));
        for id in &ids {
            let per_row: Vec<u64> = consumer
                .seen()
                .into_iter()
                .filter(|(o, _)| o == id)
                .map(|(_, v)| v)
                .collect();
            assert_eq!(per_row, vec![1, 2, 3], "row {id} in order");
        }

        let table: Arc<dyn Table> = Arc::new(StaleIndex {
            table: outbox.table().clone(),
            stale,
        });
        let stale_outbox = match place {
            Place::RowPartition => {
                Outbox::new(&summaries(&p.first.wrapped(table))).and_then(|o| o.with_index("gsi1"))
            }
            Place::SecondTable => Outbox::new(&rows)
                .and_then(|o| o.in_table(table))
                .and_then(|o| o.with_index("pending")),
        }
        .unwrap();
        let report = stale_outbox
            .drain_pending(&consumer.deliver())
            .await
            .unwrap();
        assert_eq!(
            (report.delivered, report.stale),
            (0, 1),
            "a stale entry is skipped, not an error"
        );
    }
}

/// Several drainers at once over many rows: every effect reaches the
/// consumer at least once, and per row their first deliveries are in
/// order.
async fn concurrent_drainers_deliver_in_order_per_row_at_least_once(p: Pair) {
    let clock = TestClock::default();
    let (rows, outbox) = outbox(&p, Place::SecondTable, &clock);
    let ids: Vec<String> = (0..8).map(|i| format!("o-many-{i}")).collect();
    for id in &ids {
        for revision in 1..=3 {
            let versions = [revision * 2 - 1, revision * 2];
            write_row(&p, &rows, &outbox, id, revision, &versions).await;
        }
    }
    let consumer = Consumer::default();
    let drains = (0..3).map(|_| {
        let (outbox, deliver) = (outbox.clone(), consumer.deliver());
        tokio::spawn(async move { outbox.drain_pending(&deliver).await.unwrap() })
    });
    for drain in futures::future::join_all(drains).await {
        drain.unwrap();
    }
    // Whatever a busy row left behind, one more sweep delivers.
    outbox.drain_pending(&consumer.deliver()).await.unwrap();
    for id in &ids {
        let mut first_seen = Vec::new();
        for (order, version) in consumer.seen() {
            if &order == id && !first_seen.contains(&version) {
                first_seen.push(version);
            }
        }
        assert_eq!(first_seen, vec![1, 2, 3, 4, 5, 6], "row {id}");
    }
}

/// The outbox item of a row's effect: (revision, position).
async fn effect_item(
    outbox: &Outbox,
    rows: &Entity<OrderSummary>,
    order_id: &str,
    at: (u64, u32),
) -> Item {
    let row_key = rows.key(&key(order_id)).unwrap();
    let items = outbox
        .table()
        .query(Query::partition(row_key["pk"].clone()))
        .await
        .unwrap()
        .items;
    let suffix = format!("#$outbox#{:020}#{:02}", at.0, at.1);
    items
        .into_iter()
        .find(|i| eddy_dynamo::get_str(i, "sk").is_some_and(|sk| sk.ends_with(&suffix)))
        .expect("the effect item")
}

/// Regression (issue 25): one row whose head effect did not decode (or
/// whose drain failed in the table) stopped the whole `drain_pending`
/// sweep with an error, and the head kept its claim until it expired. Now
/// each row's failure is its own, reported with the row, and the sweep
/// goes on; the undecodable head's claim is released (it stays at the
/// head: it is never skipped).
async fn one_bad_row_does_not_stop_drain_pending(p: Pair) {
    for place in [Place::RowPartition, Place::SecondTable] {
        let clock = TestClock::default();
        let (rows, outbox) = outbox(&p, place, &clock);
        let ids: Vec<String> = (0..3).map(|i| format!("o-bad-{place:?}-{i}")).collect();
        for id in &ids {
            write_row(&p, &rows, &outbox, id, 1, &[1, 2]).await;
        }
        // The head of the second row no longer decodes.
        let mut head = effect_item(&outbox, &rows, &ids[1], (1, 0)).await;
        head.insert("version".into(), s("not a number"));
        outbox
            .table()
            .put_item(Put::new(head.clone()))
            .await
            .unwrap();

        let consumer = Consumer::default();
        let report = outbox.drain_pending(&consumer.deliver()).await.unwrap();
        assert_eq!((report.rows, report.delivered), (2, 4), "the other rows");
        assert_eq!(report.failed.len(), 1);
        let (row, error) = &report.failed[0];
        assert_eq!(*row, rows.key(&key(&ids[1])).unwrap());
        assert_eq!(error.code(), "ItemDecodeError");
        assert!(consumer.seen().iter().all(|(o, _)| *o != ids[1]));
        let kept = effect_item(&outbox, &rows, &ids[1], (1, 0)).await;
        assert!(
            !kept.contains_key("claimedUntil") && !kept.contains_key("claimId"),
            "the claim is released: {kept:?}"
        );
    }
}

/// Regression (issue 25): a delivered effect was deleted by its key alone,
/// so when the key had been reused meanwhile (a tombstone expired and the
/// row started again at the same revision), the delete removed a newer
/// effect that was never delivered. Now the delete is conditioned on the
/// effect that was delivered; the newer one is delivered next.
async fn a_delivered_effect_deletes_only_itself(p: Pair) {
    for place in [Place::RowPartition, Place::SecondTable] {
        let clock = TestClock::default();
        let (rows, outbox) = outbox(&p, place, &clock);
        let id = format!("o-reuse-{place:?}");
        write_row(&p, &rows, &outbox, &id, 1, &[1]).await;
        // While effect 1 is being delivered, its key gets a newer effect.
        let mut newer = effect_item(&outbox, &rows, &id, (1, 0)).await;
        newer.insert("version".into(), n(7));
        newer.insert("enqueuedAt".into(), n(99));
        let (table, consumer) = (outbox.table().clone(), Consumer::default());
        let replaced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let deliver = {
            let consumer = consumer.clone();
            move |effect: Effect| -> BoxFuture<'static, Result<(), BoxError>> {
                consumer.record(&effect);
                let (table, newer, replaced) = (table.clone(), newer.clone(), replaced.clone());
                Box::pin(async move {
                    if !replaced.swap(true, Ordering::SeqCst) {
                        table.put_item(Put::new(newer)).await.unwrap();
                    }
                    Ok(())
                })
            }
        };
        let report = outbox
            .drain(&rows.key(&key(&id)).unwrap(), &deliver)
            .await
            .unwrap();
        assert_eq!(consumer.seen(), order(&id, &[1, 7]), "the newer effect too");
        assert_eq!(report.delivered, 2);
        assert_eq!(
            outbox
                .pending(&rows.key(&key(&id)).unwrap())
                .await
                .unwrap()
                .effects,
            0
        );
    }
}

pair_tests!(
    one_bad_row_does_not_stop_drain_pending,
    a_delivered_effect_deletes_only_itself,
    effects_commit_with_their_row_and_drain_in_order,
    effects_in_a_second_table_commit_with_their_row,
    a_crash_mid_delivery_redelivers_after_the_claim_expires,
    an_expired_claim_taken_over_keeps_order,
    a_failed_delivery_stays_at_the_head,
    drain_pending_delivers_every_row_and_skips_stale_entries,
    concurrent_drainers_deliver_in_order_per_row_at_least_once,
    the_projection_commits_effects_with_the_row,
    process_batch_delivers_each_written_rows_effects_in_order,
    apply_batch_delivers_and_a_failed_delivery_never_fails_the_row,
    the_follower_delivers_each_written_rows_effects,
    a_rebuild_enqueues_no_effect_of_an_event_the_row_had_applied,
    a_permanent_failure_parks_the_row_until_unparked_or_dropped,
);

/// Regression (issue 33): `rebuild` enqueued again the effects of every
/// event it folded, though the row had applied (and committed the effects
/// of) those at or below its checkpoint of the instance before; once a
/// consumer's deduplication state is gone, they were delivered twice. Now
/// a rebuild enqueues only the effects of events above the row's previous
/// checkpoint of their instance.
async fn a_rebuild_enqueues_no_effect_of_an_event_the_row_had_applied(p: Pair) {
    use crate::freight::{shipment, Freight, ShipmentNotice, ShipmentSummary};
    use crate::multi::{append, session_id, weighed};
    use eddy_dynamo::{EffectEvent, RebuildInstances};

    /// A notice per applied weighing (a source folded in `fold` mode).
    fn weigh_notices(
        event: &EffectEvent<'_>,
        next: Option<&ShipmentSummary>,
    ) -> Vec<ShipmentNotice> {
        match next {
            Some(next) if event.source == "weigh" => vec![ShipmentNotice {
                shipment_id: next.shipment_id.clone(),
                kind: format!("weighed {}", event.version),
            }],
            _ => Vec::new(),
        }
    }

    let f = Freight::with_read_model(p.first.table.clone(), "Rebuilt").unwrap();
    let outbox = placed(&p, Place::RowPartition, &f.summaries);
    let projection = f
        .projection_with(Some((Arc::new(outbox), weigh_notices)))
        .unwrap();
    let session = session_id(&f, "w-1");
    for kg in [1, 2] {
        let events = append(&f.weighings, &session, &[weighed("sh-1", kg)]).await;
        projection.apply_batch(events).await.unwrap();
    }
    let notices = Notices::default();
    let deliver = notices.deliver(Arc::default());
    projection.drain_pending(&deliver).await.unwrap();
    // A third weighing the row has not applied yet: the rebuild applies it.
    append(&f.weighings, &session, &[weighed("sh-1", 4)]).await;
    let instances = RebuildInstances::new().add("weigh", session.clone());
    let out = projection
        .rebuild(shipment("sh-1"), &instances)
        .await
        .unwrap();
    assert!(out.written);
    assert_eq!(out.instances[0].applied, [1, 2, 3]);
    assert_eq!(out.enqueued, 1, "only the new event's notice");
    projection.drain_pending(&deliver).await.unwrap();
    assert_eq!(notices.of("sh-1"), ["weighed 1", "weighed 2", "weighed 3"]);
}

/// A deliver that refuses `version` for good, records the others.
fn refusing(
    notices: &Notices,
    version: u64,
) -> impl Fn(Effect) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync {
    let ok = notices.deliver(Arc::default());
    move |effect: Effect| {
        if effect.version == version {
            return Box::pin(async {
                Err(eddy_dynamo::DeliveryError::permanent(
                    "stream/closed",
                    "the target stream is closed",
                )
                .into())
            });
        }
        ok(effect)
    }
}

/// A permanent failure parks the row: recorded on the head (code,
/// message, count), reported as parked, shown by `pending` and
/// `pending_rows`, and no drain tries it again (nor goes past it) until it
/// is unparked (then delivered in order) or dropped (then the row goes on).
/// A transient failure is recorded and tried again by the next drain.
async fn a_permanent_failure_parks_the_row_until_unparked_or_dropped(p: Pair) {
    use crate::freight::shipment;
    use crate::multi::{append, scan_id, scanned};

    let (f, projection) = freight_with_outbox(&p, Place::RowPartition, "Parked");
    let scans = scan_id(&f, "sh-1");
    for location in ["depot", "truck", "door"] {
        let events = append(&f.scans, &scans, &[scanned(location)]).await;
        projection.apply_batch(events).await.unwrap();
    }
    let notices = Notices::default();
    // Transient: recorded, not parked, tried again.
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let report = projection
        .drain(&shipment("sh-1"), &notices.deliver(down.clone()))
        .await
        .unwrap();
    assert!(report.undelivered.is_some() && report.parked.is_none());
    let pending = projection.pending(&shipment("sh-1")).await.unwrap();
    let failure = pending.head_failure.clone().unwrap();
    assert_eq!(
        (failure.code.as_str(), failure.failures, failure.parked),
        ("delivery/failed", 1, false)
    );
    assert!(
        failure.message.contains("the consumer is down"),
        "{}",
        failure.message
    );

    // Permanent at version 2: version 1 is delivered, the row parks at 2.
    let refuse = refusing(&notices, 2);
    let report = projection.drain(&shipment("sh-1"), &refuse).await.unwrap();
    assert_eq!(report.delivered, 1);
    let parked = report.parked.unwrap();
    assert_eq!(
        (parked.effect.version, parked.failure.code.as_str()),
        (2, "stream/closed")
    );
    assert!(parked.failure.parked);
    // Parked: no drain tries it, even one that would deliver it.
    let ok = notices.deliver(Arc::default());
    let again = projection.drain(&shipment("sh-1"), &ok).await.unwrap();
    assert_eq!(again.delivered, 0);
    assert_eq!(again.parked.as_ref().map(|p| p.effect.version), Some(2));
    let swept = projection.drain_pending(&ok).await.unwrap();
    assert_eq!((swept.delivered, swept.parked.len()), (0, 1));
    let rows = projection.pending_rows().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].is_parked());
    assert_eq!(rows[0].effects, 2);
    assert_eq!(notices.of("sh-1"), ["at depot"]);

    // Unparked: the next drain delivers it and goes on in order.
    let unparked = projection.unpark(&shipment("sh-1")).await.unwrap();
    assert_eq!(unparked.map(|p| p.effect.version), Some(2));
    assert!(projection
        .unpark(&shipment("sh-1"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        projection
            .drain(&shipment("sh-1"), &ok)
            .await
            .unwrap()
            .delivered,
        2
    );
    assert_eq!(notices.of("sh-1"), ["at depot", "at truck", "at door"]);

    // Dropped: the row goes on without it.
    for location in ["dock", "shelf"] {
        let events = append(&f.scans, &scans, &[scanned(location)]).await;
        projection.apply_batch(events).await.unwrap();
    }
    let report = projection
        .drain(&shipment("sh-1"), &refusing(&notices, 4))
        .await
        .unwrap();
    let parked = report.parked.unwrap();
    assert_eq!(parked.effect.version, 4);
    let other = Effect {
        version: 5,
        ..parked.effect.clone()
    };
    assert!(
        !projection
            .drop_parked(&shipment("sh-1"), &other)
            .await
            .unwrap(),
        "only the parked head"
    );
    assert!(projection
        .drop_parked(&shipment("sh-1"), &parked.effect)
        .await
        .unwrap());
    assert!(!projection
        .drop_parked(&shipment("sh-1"), &parked.effect)
        .await
        .unwrap());
    assert_eq!(
        projection
            .drain(&shipment("sh-1"), &ok)
            .await
            .unwrap()
            .delivered,
        1
    );
    assert_eq!(
        notices.of("sh-1"),
        ["at depot", "at truck", "at door", "at shelf"]
    );
    assert!(projection.pending_rows().await.unwrap().is_empty());
}

/// Pending effects survive every TTL sweep: a claim is never the TTL
/// attribute, and no outbox item carries it. (moto never expires items, so
/// this runs on the embedded tables, where `expire_items` is the sweep.)
async fn claims_survive_ttl_sweeps(table: EmbeddedTable) {
    let second = table
        .open_table(crate::tables::second_schema("outbox"))
        .await
        .unwrap();
    let p = Pair {
        first: table.clone().into(),
        second: Arc::new(second.clone()),
    };
    for place in [Place::RowPartition, Place::SecondTable] {
        let clock = TestClock::default();
        let (rows, outbox) = outbox(&p, place, &clock);
        let id = format!("o-ttl-{place:?}");
        write_row(&p, &rows, &outbox, &id, 1, &[1, 2]).await;
        let row_key = rows.key(&key(&id)).unwrap();
        let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
        let crashed = {
            let (outbox, row_key) = (outbox.clone(), row_key.clone());
            tokio::spawn(async move { outbox.drain(&row_key, &hanging(tx)).await.map(|_| ()) })
        };
        assert_eq!(got.recv().await, Some(1));
        crashed.abort();
        table.expire_items(u64::MAX / 2).await.unwrap();
        second.expire_items(u64::MAX / 2).await.unwrap();
        clock.advance_secs(31);
        let consumer = Consumer::default();
        let report = outbox.drain(&row_key, &consumer.deliver()).await.unwrap();
        assert_eq!(consumer.seen(), order(&id, &[1, 2]), "{report:?}");
    }
    // A table that expires items by an attribute outbox items use is refused.
    let claims = crate::tables::second_schema("claims").with_ttl("claimedUntil");
    let claims = table.open_table(claims).await.unwrap();
    let refused = Outbox::new(&summaries(&p.first))
        .unwrap()
        .in_table(Arc::new(claims))
        .unwrap_err();
    assert_eq!(refused.code(), "table/misconfigured");
}

#[tokio::test]
async fn claims_survive_ttl_sweeps_on_memory() {
    claims_survive_ttl_sweeps(EmbeddedTable::memory(
        crate::common::schema().with_ttl("ttl"),
    ))
    .await;
}

#[tokio::test]
async fn claims_survive_ttl_sweeps_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let schema = crate::common::schema().with_ttl("ttl");
    let table = EmbeddedTable::open_sqlite(dir.path().join("ttl.db"), schema).unwrap();
    claims_survive_ttl_sweeps(table).await;
}

/// Through the projection: each applied scan commits a notice with its
/// row's write (in the row's partition or the second table); a write
/// without effects stays one put; draining delivers the notices in order;
/// `create` over a projection's tombstone moves its revision on.
async fn the_projection_commits_effects_with_the_row(p: Pair) {
    use crate::freight::{shipment, Freight, ShipmentNotice};
    use crate::multi::{append, parcels, scan_id, scanned};

    for place in [Place::RowPartition, Place::SecondTable] {
        let f = Freight::with_read_model(p.first.table.clone(), &format!("Ship{place:?}")).unwrap();
        let outbox = Outbox::new(&f.summaries).unwrap();
        let outbox = match place {
            Place::RowPartition => outbox,
            Place::SecondTable => outbox.in_table(p.second.clone()).unwrap(),
        };
        let projection = f.projection(Some(Arc::new(outbox.clone()))).unwrap();
        let scans = scan_id(&f, "sh-1");
        for location in ["depot", "truck", "door"] {
            let events = append(&f.scans, &scans, &[scanned(location)]).await;
            let out = projection.apply_batch(events).await.unwrap();
            assert_eq!(out[0].enqueued, 1);
        }
        let o = crate::multi::order_id(&f, "o-1");
        let events = append(&f.orders, &o, &[parcels("sh-1", 2)]).await;
        let before = p.first.table.request_stats();
        let out = projection.apply_batch(events).await.unwrap();
        assert_eq!(out[0].enqueued, 0);
        let after = p.first.table.request_stats();
        assert_eq!(
            after.transactions, before.transactions,
            "no effects: one put, no transaction"
        );

        let notices = Arc::new(Mutex::new(Vec::new()));
        let deliver = {
            let notices = notices.clone();
            move |effect: Effect| {
                let notices = notices.clone();
                async move {
                    notices
                        .lock()
                        .unwrap()
                        .push(effect.decode::<ShipmentNotice>()?.kind);
                    Ok::<(), BoxError>(())
                }
            }
        };
        let row = f.summaries.key(&shipment("sh-1")).unwrap();
        assert_eq!(outbox.drain(&row, &deliver).await.unwrap().delivered, 3);
        assert_eq!(
            *notices.lock().unwrap(),
            ["at depot", "at truck", "at door"]
        );
    }
}

/// Notices as a consumer receives them: (shipment, kind, version).
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<(String, String, u64)>>>);

impl Notices {
    fn seen(&self) -> Vec<(String, String, u64)> {
        self.0.lock().unwrap().clone()
    }
    fn of(&self, shipment: &str) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|(s, _, _)| s == shipment)
            .map(|(_, kind, _)| kind)
            .collect()
    }
    /// A deliver that records each notice, or fails while `down` holds.
    fn deliver(
        &self,
        down: Arc<std::sync::atomic::AtomicBool>,
    ) -> impl Fn(Effect) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync {
        let notices = self.clone();
        move |effect: Effect| {
            if down.load(Ordering::SeqCst) {
                return Box::pin(async { Err("the consumer is down".into()) });
            }
            let notices = notices.clone();
            Box::pin(async move {
                let notice: crate::freight::ShipmentNotice = effect.decode()?;
                notices
                    .0
                    .lock()
                    .unwrap()
                    .push((notice.shipment_id, notice.kind, effect.version));
                Ok(())
            })
        }
    }
}

/// The freight projection with its outbox in `place`, under a read model
/// of its own.
fn freight_with_outbox(
    p: &Pair,
    place: Place,
    name: &str,
) -> (
    crate::freight::Freight,
    eddy_dynamo::MultiProjection<crate::freight::ShipmentSummary, crate::freight::ShipmentKey>,
) {
    let f = crate::freight::Freight::with_read_model(
        p.first.table.clone(),
        &format!("{name}{place:?}"),
    )
    .unwrap();
    let outbox = placed(p, place, &f.summaries);
    let projection = f.projection(Some(Arc::new(outbox))).unwrap();
    (f, projection)
}

/// Appends a scan of sh-1 at `location` and processes the change records
/// after `seen` (delivering): the records and what processing did.
async fn scan_sh1(
    p: &Pair,
    f: &crate::freight::Freight,
    seen: &[eddy_dynamo::ChangeRecord],
    location: &str,
    projections: &[&dyn eddy_dynamo::BatchProjection],
    deliver: &dyn eddy_dynamo::Deliver,
) -> (Vec<eddy_dynamo::ChangeRecord>, eddy_dynamo::BatchResult) {
    use crate::multi::{append, scan_id, scanned};
    use eddy_dynamo::ChangeFeed;
    let last = p.first.read_changes(None, seen.len()).await.unwrap();
    append(&f.scans, &scan_id(f, "sh-1"), &[scanned(location)]).await;
    let records = p
        .first
        .read_changes(last.last_position(), 10_000)
        .await
        .unwrap()
        .into_records();
    let result = eddy_dynamo::process_batch_delivering(&records, projections, deliver).await;
    (records, result)
}

/// `process_batch_delivering`: each row whose write enqueued notices has
/// them delivered right after the write, in order; a failed delivery
/// leaves the notice at the head, reported on the row, while the record
/// is done (no failure, nothing for Lambda to retry); the next batch's
/// delivery hands the stuck notice over first.
async fn process_batch_delivers_each_written_rows_effects_in_order(p: Pair) {
    use crate::freight::shipment;
    use crate::multi::{append, parcels, scan_id, scanned};
    use eddy_dynamo::{process_batch_delivering, BatchProjection, ChangeFeed};

    for place in [Place::RowPartition, Place::SecondTable] {
        let (f, projection) = freight_with_outbox(&p, place, "Delivered");
        let projections: [&dyn BatchProjection; 1] = [&projection];
        let notices = Notices::default();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let deliver = notices.deliver(down.clone());
        let seen = p.first.read_changes(None, 10_000).await.unwrap();
        let last = seen.last_position().cloned();

        append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("depot")]).await;
        append(&f.scans, &scan_id(&f, "sh-2"), &[scanned("dock")]).await;
        let o = crate::multi::order_id(&f, &format!("o-{place:?}"));
        append(&f.orders, &o, &[parcels("sh-3", 1)]).await;
        let records = p
            .first
            .read_changes(last.as_ref(), 10_000)
            .await
            .unwrap()
            .into_records();
        let result = process_batch_delivering(&records, &projections, &deliver).await;
        assert!(result.failures.is_empty(), "{:?}", result.failures);
        let mine: Vec<_> = result
            .rows
            .iter()
            .filter(|r| r.projection == "shipments" && r.written)
            .collect();
        assert_eq!(mine.len(), 3);
        for row in &mine {
            match row.enqueued {
                0 => assert!(row.delivery.is_none(), "nothing enqueued, nothing drained"),
                _ => {
                    let report = row.delivery.as_ref().unwrap().as_ref().unwrap();
                    assert_eq!((report.delivered, report.busy), (1, false));
                    assert!(report.undelivered.is_none());
                }
            }
        }
        assert_eq!(notices.of("sh-1"), ["at depot"]);
        assert_eq!(notices.of("sh-2"), ["at dock"]);
        assert_eq!(
            projection.pending(&shipment("sh-1")).await.unwrap().effects,
            0
        );
        // The scan streams are shared by both places' read models.
        let first = notices
            .seen()
            .into_iter()
            .find(|(s, _, _)| s == "sh-1")
            .map(|(_, _, v)| v)
            .unwrap();

        // The consumer is down: the record is still done.
        down.store(true, Ordering::SeqCst);
        let (records, result) = scan_sh1(&p, &f, &records, "truck", &projections, &deliver).await;
        assert!(result.failures.is_empty(), "{:?}", result.failures);
        assert!(result.response.batch_item_failures.is_empty());
        let row = result.rows.iter().find(|r| r.enqueued == 1).unwrap();
        assert!(row.is_applied(), "a failed delivery never fails the row");
        let stuck = row.undelivered().expect("reported as undelivered");
        assert_eq!(stuck.effect.version, first + 1);
        assert_eq!(stuck.error.to_string(), "the consumer is down");
        let pending = projection.pending(&shipment("sh-1")).await.unwrap();
        assert_eq!(pending.effects, 1);
        assert_eq!(pending.head.map(|h| h.version), Some(first + 1));
        assert!(
            pending.oldest_claim.is_none(),
            "the failed claim was given back"
        );

        // Back up: the stuck notice goes first, then the new one.
        down.store(false, Ordering::SeqCst);
        let (_, result) = scan_sh1(&p, &f, &records, "door", &projections, &deliver).await;
        assert!(result.failures.is_empty(), "{:?}", result.failures);
        let row = result.rows.iter().find(|r| r.enqueued == 1).unwrap();
        assert_eq!(
            row.delivery.as_ref().unwrap().as_ref().unwrap().delivered,
            2
        );
        assert_eq!(notices.of("sh-1"), ["at depot", "at truck", "at door"]);
        let versions: Vec<u64> = notices
            .seen()
            .into_iter()
            .filter(|(s, _, _)| s == "sh-1")
            .map(|(_, _, v)| v)
            .collect();
        assert_eq!(
            versions,
            [first, first + 1, first + 2],
            "each notice carries its event's version"
        );
        assert!(projection.pending_rows().await.unwrap().is_empty());
    }
}

/// `apply_batch_delivering` delivers the same way; without a deliver
/// nothing is drained and `drain` / `drain_pending` hand the notices over
/// later, with `pending` / `pending_rows` showing what waits.
async fn apply_batch_delivers_and_a_failed_delivery_never_fails_the_row(p: Pair) {
    use crate::freight::shipment;
    use crate::multi::{append, scan_id, scanned};

    for place in [Place::RowPartition, Place::SecondTable] {
        let (f, projection) = freight_with_outbox(&p, place, "Applied");
        let notices = Notices::default();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let deliver = notices.deliver(down.clone());

        let events = append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("depot")]).await;
        let out = projection
            .apply_batch_delivering(events, &deliver)
            .await
            .unwrap();
        assert!(out[0].is_applied() && out[0].written);
        let stuck = out[0].undelivered().unwrap();
        let notice: crate::freight::ShipmentNotice = stuck.effect.decode().unwrap();
        assert_eq!(notice.kind, "at depot");

        // Without a deliver: committed, not drained.
        let events = append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("truck")]).await;
        let out = projection.apply_batch(events).await.unwrap();
        assert!(out[0].delivery.is_none());
        let events = append(&f.scans, &scan_id(&f, "sh-2"), &[scanned("dock")]).await;
        projection.apply_batch(events).await.unwrap();

        let waiting = projection.pending_rows().await.unwrap();
        let mut rows: Vec<usize> = waiting.iter().map(|r| r.effects).collect();
        rows.sort_unstable();
        assert_eq!(rows, [1, 2]);
        assert!(waiting
            .iter()
            .all(|r| r.head.is_some() && r.oldest_claim.is_none()));

        down.store(false, Ordering::SeqCst);
        let report = projection.drain(&shipment("sh-1"), &deliver).await.unwrap();
        assert_eq!(report.delivered, 2);
        let report = projection.drain_pending(&deliver).await.unwrap();
        assert_eq!((report.rows, report.delivered), (1, 1));
        assert_eq!(notices.of("sh-1"), ["at depot", "at truck"]);
        assert_eq!(notices.of("sh-2"), ["at dock"]);
    }
}

/// The Lambda handler with a deliver: the DynamoDB Streams event as
/// Lambda sends it, each written row's notices delivered, no failure in
/// the response.
#[tokio::test]
async fn the_lambda_handler_delivers_each_written_rows_effects() {
    use crate::multi::{append, scan_id, scanned};
    use eddy_dynamo::{handle_stream_event_delivering, BatchProjection, ChangeFeed, StreamEvent};

    let p = crate::tables::memory_pair().await;
    let (f, projection) = freight_with_outbox(&p, Place::RowPartition, "Lambda");
    append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("depot")]).await;
    append(&f.scans, &scan_id(&f, "sh-2"), &[scanned("dock")]).await;
    let records = p
        .first
        .read_changes(None, 100)
        .await
        .unwrap()
        .into_records();
    let json = serde_json::json!({ "Records": records }).to_string();
    let event: StreamEvent = serde_json::from_str(&json).unwrap();
    let notices = Notices::default();
    let deliver = notices.deliver(Arc::default());
    let projections: [&dyn BatchProjection; 1] = [&projection];
    let response = handle_stream_event_delivering(event, &projections, &deliver).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(notices.of("sh-1"), ["at depot"]);
    assert_eq!(notices.of("sh-2"), ["at dock"]);
    assert!(projection.pending_rows().await.unwrap().is_empty());
}

/// A follower with a deliver: each written row's notices are delivered as
/// the follower processes its batches.
async fn the_follower_delivers_each_written_rows_effects(p: Pair) {
    use crate::multi::{append, scan_id, scanned};
    use eddy_dynamo::{BatchProjection, Follower};

    let (f, projection) = freight_with_outbox(&p, Place::RowPartition, "Followed");
    append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("depot")]).await;
    append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("truck")]).await;
    append(&f.scans, &scan_id(&f, "sh-2"), &[scanned("dock")]).await;
    let notices = Notices::default();
    let follower = Follower::new(p.first.clone(), format!("followed-{}", p.first.backend))
        .batch_size(1)
        .deliver(notices.deliver(Arc::default()));
    let projections: [&dyn BatchProjection; 1] = [&projection];
    follower.catch_up(&projections).await.unwrap();
    assert_eq!(notices.of("sh-1"), ["at depot", "at truck"]);
    assert_eq!(notices.of("sh-2"), ["at dock"]);
    assert!(projection.pending_rows().await.unwrap().is_empty());
}
