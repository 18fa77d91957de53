//! The `eddy streams` commands, run as a user runs them.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

struct Eddy {
    data: tempfile::TempDir,
}

impl Eddy {
    fn new() -> Self {
        Eddy {
            data: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_eddy"));
        command
            .arg("streams")
            .arg("--data")
            .arg(self.data.path())
            .args(args);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run eddy")
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "eddy {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(!output.status.success(), "eddy {args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "one line of error: {stderr}"
        );
        stderr
    }
}

#[test]
fn create_append_read_close_delete() {
    let eddy = Eddy::new();
    assert!(eddy
        .ok(&["create", "facts/ws-42"])
        .starts_with("created facts/ws-42"));
    assert!(eddy.ok(&["create", "facts/ws-42"]).starts_with("exists"));
    let after_two = eddy
        .ok(&["append", "facts/ws-42", r#"[{"n":1},{"n":2}]"#])
        .trim()
        .to_owned();
    assert!(
        after_two.ends_with("_0000000000000002"),
        "the offset after two messages: {after_two}"
    );
    let mut stdin_append = eddy
        .command(&["append", "facts/ws-42"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    if let Some(mut stdin) = stdin_append.stdin.take() {
        std::io::Write::write_all(&mut stdin, br#"{"n":3}"#).expect("write stdin");
    }
    assert!(stdin_append.wait().expect("wait").success());
    assert_eq!(
        eddy.ok(&["read", "facts/ws-42"]),
        "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"
    );
    assert_eq!(
        eddy.ok(&["read", "facts/ws-42", "--from", &after_two]),
        "{\"n\":3}\n"
    );
    assert_eq!(
        eddy.ok(&["read", "facts/ws-42", "--limit", "1"]),
        "{\"n\":1}\n"
    );
    assert!(eddy
        .ok(&["close", "facts/ws-42"])
        .contains("_0000000000000003"));
    assert!(eddy
        .fails(&["append", "facts/ws-42", "4"])
        .contains("closed"));
    let listed = eddy.ok(&["ls"]);
    let (incarnation, _) = after_two.split_once('_').expect("an offset");
    assert!(
        listed.starts_with(&format!(
            "facts/ws-42\tapplication/json\t{incarnation}_0000000000000003\tclosed"
        )),
        "{listed}"
    );
    eddy.ok(&["delete", "facts/ws-42"]);
    assert!(eddy.fails(&["read", "facts/ws-42"]).contains("was deleted"));
    assert_eq!(eddy.ok(&["ls"]), "");
}

#[test]
fn producer_appends_are_idempotent() {
    let eddy = Eddy::new();
    eddy.ok(&["create", "p"]);
    let args = ["append", "p", "1", "--producer", "cli", "--seq", "0"];
    assert!(!eddy.ok(&args).contains("duplicate"));
    assert!(eddy.ok(&args).contains("duplicate"));
    assert!(eddy
        .fails(&["append", "p", "2", "--producer", "cli", "--seq", "5"])
        .contains("expected 1"));
    assert_eq!(eddy.ok(&["read", "p"]), "1\n");
}

#[test]
fn bad_input_is_one_clear_line() {
    let eddy = Eddy::new();
    assert!(eddy.fails(&["read", "nope"]).contains("does not exist"));
    assert!(eddy
        .fails(&["create", "a//b"])
        .contains("invalid stream path"));
    eddy.ok(&["create", "j"]);
    assert!(eddy
        .fails(&["append", "j", "{not json"])
        .contains("invalid JSON"));
    assert!(eddy
        .fails(&["append", "j", "[]"])
        .contains("empty JSON array"));
    assert!(eddy
        .fails(&["read", "j", "--from", "12"])
        .contains("malformed offset"));
    assert!(eddy
        .fails(&[
            "append",
            "j",
            "1",
            "--expect-tail",
            "0000000000000000_0000000000000009"
        ])
        .contains("expected the tail"));
    assert_eq!(
        eddy.ok(&["read", "j"]),
        "",
        "nothing was written by the failures"
    );
}

#[test]
fn tail_follows_until_closed() {
    let eddy = Eddy::new();
    eddy.ok(&["create", "live", "--content-type", "text/plain"]);
    eddy.ok(&["append", "live", "before"]);
    let mut tail = eddy
        .command(&["tail", "live", "--from", "-1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tail");
    let mut lines = BufReader::new(tail.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("before"));
    eddy.ok(&["append", "live", "after"]);
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("after"));
    eddy.ok(&["close", "live"]);
    assert!(
        tail.wait().expect("tail exits").success(),
        "tail ends when the stream closes"
    );
}

#[test]
fn export_then_import_into_another_store() {
    let source = Eddy::new();
    source.ok(&["create", "orders/a"]);
    source.ok(&["append", "orders/a", r#"[{"n":1},{"n":2}]"#]);
    source.ok(&[
        "append",
        "orders/a",
        r#"{"n":3}"#,
        "--producer",
        "w",
        "--seq",
        "0",
    ]);
    source.ok(&["create", "logs/b", "--content-type", "text/plain"]);
    source.ok(&["append", "logs/b", "one", "--close"]);
    let backup = source.data.path().join("backup.jsonl");
    let backup = backup.to_string_lossy().into_owned();
    source.ok(&["export", "--output", &backup]);
    let stdout_copy = source.ok(&["export"]);
    assert_eq!(
        std::fs::read_to_string(&backup).expect("backup"),
        stdout_copy,
        "the file and standard output hold the same backup"
    );

    let target = Eddy::new();
    target.ok(&["import", &backup]);
    // The same streams at the same positions; each restored stream is a
    // new incarnation, so the first part of its offsets differs.
    let positions = |listing: String| -> String {
        listing
            .split_inclusive(char::is_whitespace)
            .map(|word| match word.trim_end().split_once('_') {
                Some((incarnation, _))
                    if incarnation.len() == 16
                        && incarnation.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    word.replacen(incarnation, "<incarnation>", 1)
                }
                _ => word.to_owned(),
            })
            .collect()
    };
    assert_eq!(positions(target.ok(&["ls"])), positions(source.ok(&["ls"])));
    assert_ne!(target.ok(&["ls"]), source.ok(&["ls"]));
    assert_eq!(
        target.ok(&["read", "orders/a"]),
        "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"
    );
    let retry = target.ok(&[
        "append",
        "orders/a",
        r#"{"n":3}"#,
        "--producer",
        "w",
        "--seq",
        "0",
    ]);
    assert!(retry.contains("duplicate"), "{retry}");
    let refused = target.fails(&["import", &backup]);
    assert!(
        refused.contains("logs/b") && refused.contains("exists"),
        "{refused}"
    );
    target.ok(&["import", &backup, "--overwrite"]);
    assert_eq!(target.ok(&["read", "logs/b"]), "one\n");
}

/// `create --retention` keeps the policy; `ls` shows it with the
/// earliest offset kept; a bad policy is refused before anything is made.
#[test]
fn create_takes_a_retention_policy_and_ls_shows_it() {
    let eddy = Eddy::new();
    eddy.ok(&["create", "logs/a", "--retention", "messages=2; age=7d"]);
    eddy.ok(&["append", "logs/a", "[1,2,3]"]);
    let listed = eddy.ok(&["ls"]);
    let columns: Vec<&str> = listed.trim_end().split('\t').collect();
    assert_eq!(columns.len(), 8, "{listed}");
    assert_eq!(columns[0], "logs/a");
    assert!(
        columns[5].starts_with("from ") && columns[5].ends_with("_0000000000000000"),
        "{listed}"
    );
    assert_eq!(columns[6], "retention messages=2; age=7d");
    assert_eq!(columns[7], "compaction none");
    assert!(eddy
        .fails(&["create", "logs/b", "--retention", "messages=0"])
        .contains("retention"));
    assert!(!eddy.ok(&["ls"]).contains("logs/b"));
}

#[test]
fn compact_runs_a_pass_now_and_ls_shows_the_policy() {
    let eddy = Eddy::new();
    eddy.ok(&["create", "rows", "--compaction", "deletes=7d"]);
    for value in 0..5 {
        let change = format!(
            r#"{{"type":"row","key":"a","value":{value},"headers":{{"operation":"upsert"}}}}"#
        );
        eddy.ok(&["append", "rows", &change]);
    }
    let compacted = eddy.ok(&["compact", "rows"]);
    assert!(
        compacted.starts_with("compacted rows: dropped 4 messages"),
        "{compacted}"
    );
    assert_eq!(
        eddy.ok(&["read", "rows"]),
        "{\"type\":\"row\",\"key\":\"a\",\"value\":4,\"headers\":{\"operation\":\"upsert\"}}\n"
    );
    let listed = eddy.ok(&["ls"]);
    assert!(listed.ends_with("\tcompaction deletes=7d\n"), "{listed}");
    assert!(eddy
        .fails(&[
            "create",
            "text",
            "--content-type",
            "text/plain",
            "--compaction",
            "on"
        ])
        .contains("only JSON streams"));
}

/// `compact` through a running server: the server runs the pass, with
/// the token that may write the stream; without it nothing is dropped.
#[test]
fn compact_through_a_server_runs_the_pass_there() {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_string_lossy().into_owned();
    let (mut server, url) = crate::crash::serve(
        crate::crash::eddy_binary(),
        &[
            "--storage",
            "sqlite",
            "--data",
            &dir,
            "--auth-token",
            "secret",
        ],
    );
    let remote = |token: &str, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_eddy"))
            .args(["streams", "--server", &url, "--token", token])
            .args(args)
            .output()
            .expect("run eddy")
    };
    let ok = |args: &[&str]| {
        let output = remote("secret", args);
        assert!(
            output.status.success(),
            "eddy {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    ok(&["create", "rows", "--compaction", "on"]);
    for value in 0..3 {
        let change = format!(
            r#"{{"type":"row","key":"a","value":{value},"headers":{{"operation":"upsert"}}}}"#
        );
        ok(&["append", "rows", &change]);
    }
    let refused = remote("wrong", &["compact", "rows"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let compacted = ok(&["compact", "rows"]);
    let read = ok(&["read", "rows"]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        compacted.starts_with("compacted rows: dropped 2 messages"),
        "{compacted}"
    );
    assert_eq!(
        read,
        "{\"type\":\"row\",\"key\":\"a\",\"value\":2,\"headers\":{\"operation\":\"upsert\"}}\n"
    );
}
