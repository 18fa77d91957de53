//! Writers in different processes on one stream: offsets stay gap-free
//! and ordered.
//!
//! The test binary re-runs itself as the writer processes (the ignored
//! test `pg_writer_process`); they open their stores, say `ready`, and all
//! start appending when the parent says `go`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use eddy_streams::{
    Append, Payload, ProducerPosition, ReadFrom, Storage, StreamConfig, StreamPath, SystemClock,
};

use super::{run, Schema};

const PROCESSES: usize = 4;
const TASKS: usize = 2;
const APPENDS: u64 = 40;
const SCHEMA_VAR: &str = "EDDY_PG_SCHEMA";
const WRITER_VAR: &str = "EDDY_PG_WRITER";

fn stream() -> StreamPath {
    StreamPath::new("processes/shared").expect("valid path")
}

/// Not a test on its own: a writer process of
/// `writers_in_several_processes_get_gap_free_ordered_offsets`. Each of its
/// tasks appends as its own producer and prints `ack <producer> <seq>
/// <offset position>`.
#[test]
#[ignore = "entry point of the multi-process writers"]
fn pg_writer_process() {
    let (Ok(name), Ok(writer), Some(url)) = (
        std::env::var(SCHEMA_VAR),
        std::env::var(WRITER_VAR),
        super::database_url(),
    ) else {
        panic!("run by writers_in_several_processes_get_gap_free_ordered_offsets only");
    };
    let schema = Schema { url, name };
    run(async move {
        let store = Arc::new(schema.open(Arc::new(SystemClock)).await);
        store
            .create(&stream(), StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        println!("ready");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("go");
        let tasks = (0..TASKS).map(|task| {
            let store = Arc::clone(&store);
            let producer = format!("p{writer}-{task}");
            tokio::spawn(async move {
                let mut acks = Vec::new();
                for seq in 0..APPENDS {
                    let append = Append::body(format!("\"{producer}/{seq}\""))
                        .with_producer(ProducerPosition::new(producer.clone(), 0, seq));
                    let appended = store.append(&stream(), append).await.expect("append");
                    acks.push(format!(
                        "ack {producer} {seq} {}",
                        appended.next_offset.position()
                    ));
                }
                acks
            })
        });
        for acks in futures::future::join_all(tasks).await {
            for ack in acks.expect("join") {
                println!("{ack}");
            }
        }
    });
}

#[test]
fn writers_in_several_processes_get_gap_free_ordered_offsets() {
    let Some(schema) = Schema::fresh("writers_in_several_processes") else {
        return;
    };
    let exe = std::env::current_exe().expect("test binary");
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|writer| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "postgres::processes::pg_writer_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SCHEMA_VAR, &schema.name)
                .env(WRITER_VAR, writer.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a writer")
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|child| BufReader::new(child.stdout.take().expect("stdout")).lines())
        .collect();
    // The harness may print the test name on the same line first.
    for lines in &mut outputs {
        let ready = lines.map_while(Result::ok).any(|l| l.ends_with("ready"));
        assert!(ready, "a writer did not start");
    }
    for child in &mut children {
        let stdin = child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "go").expect("go");
    }
    let mut positions = BTreeSet::new();
    let mut per_producer: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for lines in outputs {
        for line in lines.map_while(Result::ok) {
            let parts: Vec<&str> = line.split(' ').collect();
            if let ["ack", producer, _seq, position] = parts[..] {
                let position: u64 = position.parse().expect("position");
                assert!(positions.insert(position), "offset {position} given twice");
                per_producer
                    .entry(producer.to_owned())
                    .or_default()
                    .push(position);
            }
        }
    }
    for child in &mut children {
        assert!(child.wait().expect("wait").success(), "a writer failed");
    }
    let total = (PROCESSES * TASKS) as u64 * APPENDS;
    assert_eq!(
        positions,
        (1..=total).collect::<BTreeSet<_>>(),
        "every append got its own offset, with no gap"
    );
    for (producer, ends) in &per_producer {
        assert!(
            ends.windows(2).all(|w| w[0] < w[1]),
            "{producer}'s appends are ordered"
        );
    }
    run(async move {
        let store = schema.open(Arc::new(SystemClock)).await;
        let chunk = store
            .read(&stream(), ReadFrom::Beginning, usize::MAX)
            .await
            .expect("read");
        assert_eq!(chunk.messages.len() as u64, total);
        for (producer, ends) in &per_producer {
            for (seq, end) in ends.iter().enumerate() {
                let stored = &chunk.messages[*end as usize - 1];
                assert_eq!(stored, &format!("\"{producer}/{seq}\""));
            }
        }
        drop(store);
        schema.drop().await;
    });
}
