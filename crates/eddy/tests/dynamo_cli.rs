//! `eddy dynamo create-table` against the local DynamoDB-compatible server
//! (moto) that `scripts/test.sh` starts; `EDDY_DYNAMODB_ENDPOINT` names it.
#![cfg(feature = "aws")]

use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

fn endpoint() -> Option<String> {
    match std::env::var("EDDY_DYNAMODB_ENDPOINT") {
        Ok(url) => Some(url),
        Err(_) if std::env::var("EDDY_SKIP_MOTO").is_ok() => {
            eprintln!("skipped: EDDY_SKIP_MOTO is set");
            None
        }
        Err(_) => panic!("EDDY_DYNAMODB_ENDPOINT is not set: run `eval \"$(scripts/moto.sh start)\"` first, or set EDDY_SKIP_MOTO=1"),
    }
}

fn create_table(endpoint: &str, table: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eddy"))
        .args([
            "dynamo",
            "create-table",
            "--table",
            table,
            "--dynamodb-endpoint",
            endpoint,
            "--region",
            "us-east-1",
        ])
        // Credentials for the child only: moto accepts any.
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .expect("run eddy")
}

#[test]
fn create_table_is_idempotent_and_refuses_bad_names() {
    let Some(endpoint) = endpoint() else { return };
    eprintln!("backend: dynamodb (moto at {endpoint})");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let table = format!("eddy-cli-{nanos}");
    for expected in ["created", "already exists"] {
        let output = create_table(&endpoint, &table);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "create-table failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("table {table} {expected}")),
            "expected `{expected}`: {stdout}"
        );
        assert!(stdout.contains("stream NEW_AND_OLD_IMAGES"), "{stdout}");
    }
    let bad = create_table(&endpoint, "x");
    assert!(
        !bad.status.success(),
        "a 1-character table name was accepted"
    );
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one line of error: {stderr}"
    );
}
