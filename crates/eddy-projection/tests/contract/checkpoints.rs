//! The `CheckpointStore` contract: the cases every checkpoint backend runs
//! (memory, SQLite and the remote client here; a new backend includes this
//! file with `#[path]` and runs each case on a fresh store).
//!
//! A case gets a store that holds nothing yet and uses keys of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_projection::{Checkpoint, CheckpointKey, CheckpointStore, Failure, InputMark, Token};
use eddy_streams::Offset;
use serde_json::json;

/// A key of its own for each case.
pub fn key(case: &str) -> CheckpointKey {
    CheckpointKey::new("contract", 1, &json!({ "case": case })).expect("key")
}

/// The checkpoint after `n` units: every field set.
pub fn checkpoint(n: u64) -> Checkpoint {
    Checkpoint {
        state: json!({ "total": n, "note": "ü ✓" }),
        inputs: BTreeMap::from([(
            "orders".to_owned(),
            InputMark {
                offset: Offset::new(1_764_000_000_000_000, n),
                path: Some("shop/orders".into()),
                ..InputMark::default()
            },
        )]),
        generation: "g-1".into(),
        next_seq: BTreeMap::from([("totals".to_owned(), n)]),
        units: n,
        committed_at_ms: Some(1_764_547_200_000 + n),
        failure: Some(Failure {
            code: "handler/failed".into(),
            message: format!("unit {n} refused"),
            at_ms: 1_764_547_200_000 + n,
        }),
        ..Checkpoint::default()
    }
}

fn conflict(result: eddy_projection::Result<Token>) {
    match result {
        Err(e) => assert_eq!(e.code(), "checkpoint/conflict", "{e}"),
        Ok(token) => panic!("a stale token was accepted: {token}"),
    }
}

pub async fn a_new_binding_has_no_checkpoint(store: Arc<dyn CheckpointStore>) {
    let loaded = store.load(&key("new")).await.expect("load");
    assert_eq!(loaded.checkpoint, None);
    assert_eq!(loaded.token, Token::NONE);
}

pub async fn a_save_is_what_the_next_load_sees(store: Arc<dyn CheckpointStore>) {
    let key = key("save");
    let token = store
        .save(&key, Token::NONE, &checkpoint(1))
        .await
        .expect("save");
    assert_eq!(token.version(), 1);
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.checkpoint, Some(checkpoint(1)));
    assert_eq!(
        loaded.token, token,
        "a reload continues where the save left"
    );
    let next = store
        .save(&key, loaded.token, &checkpoint(2))
        .await
        .expect("save with the loaded token");
    assert_eq!(next.version(), 2);
}

pub async fn a_stale_token_conflicts_and_writes_nothing(store: Arc<dyn CheckpointStore>) {
    let key = key("stale");
    let first = store
        .save(&key, Token::NONE, &checkpoint(1))
        .await
        .expect("save");
    let second = store.save(&key, first, &checkpoint(2)).await.expect("save");
    conflict(store.save(&key, first, &checkpoint(9)).await);
    conflict(store.save(&key, Token::NONE, &checkpoint(9)).await);
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(
        loaded.checkpoint,
        Some(checkpoint(2)),
        "nothing overwritten"
    );
    assert_eq!(loaded.token, second);
}

/// Two writers on one binding: whichever saves second with the token it
/// loaded is refused, however many saves the first made in between (the
/// store may reuse its own storage along the way; no old token may match
/// again).
pub async fn a_second_writer_is_fenced_at_every_step(store: Arc<dyn CheckpointStore>) {
    let key = key("fenced");
    let both = store.load(&key).await.expect("load").token;
    let mut tokens = vec![store
        .save(&key, both, &checkpoint(1))
        .await
        .expect("writer a")];
    conflict(store.save(&key, both, &checkpoint(1)).await);
    for n in 2..=300 {
        let last = tokens.last().copied().expect("a token");
        tokens.push(store.save(&key, last, &checkpoint(n)).await.expect("save"));
    }
    for (n, stale) in tokens.iter().enumerate().take(299) {
        let result = store.save(&key, *stale, &checkpoint(1_000)).await;
        assert!(
            matches!(&result, Err(e) if e.code() == "checkpoint/conflict"),
            "the token of save {} was accepted after save 300",
            n + 1
        );
    }
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.checkpoint, Some(checkpoint(300)));
    assert_eq!(loaded.token.version(), 300);
}

pub async fn forget_drops_the_checkpoint_and_fences_old_tokens(store: Arc<dyn CheckpointStore>) {
    let key = key("forget");
    assert_eq!(
        store
            .forget(&key, Token::NONE)
            .await
            .expect("nothing to forget"),
        Token::NONE
    );
    let saved = store
        .save(&key, Token::NONE, &checkpoint(1))
        .await
        .expect("save");
    let again = store.save(&key, saved, &checkpoint(2)).await.expect("save");
    conflict(store.forget(&key, saved).await);
    let forgotten = store.forget(&key, again).await.expect("forget");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.checkpoint, None, "forgotten");
    assert_eq!(loaded.token, forgotten);
    conflict(store.save(&key, again, &checkpoint(3)).await);
    conflict(store.save(&key, Token::NONE, &checkpoint(3)).await);
    let reborn = store
        .save(&key, forgotten, &checkpoint(3))
        .await
        .expect("a new checkpoint after the forget");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.checkpoint, Some(checkpoint(3)));
    assert_eq!(loaded.token, reborn);
}

/// States of megabytes round-trip whole, save after save.
pub async fn large_states_round_trip(store: Arc<dyn CheckpointStore>) {
    let key = key("large");
    let mut token = Token::NONE;
    for n in 1..=4u64 {
        let mut big = checkpoint(n);
        big.state = json!({ "blob": "x".repeat(3 << 20), "n": n });
        token = store.save(&key, token, &big).await.expect("save");
        let loaded = store.load(&key).await.expect("load");
        assert_eq!(loaded.checkpoint, Some(big), "save {n}");
        assert_eq!(loaded.token, token);
    }
}

/// `keys` lists the bindings with a checkpoint, sorted by path, with the
/// keys they were saved under; a forgotten one is gone from the list or
/// loads none.
pub async fn keys_list_the_saved_bindings(store: Arc<dyn CheckpointStore>) {
    let (a, b) = (key("keys-a"), key("keys-b"));
    let token_b = store
        .save(&b, Token::NONE, &checkpoint(1))
        .await
        .expect("save b");
    store
        .save(&a, Token::NONE, &checkpoint(1))
        .await
        .expect("save a");
    let listed = |keys: Vec<CheckpointKey>| -> Vec<CheckpointKey> {
        keys.into_iter()
            .filter(|k| k.params.contains("keys-"))
            .collect()
    };
    let keys = listed(store.keys().await.expect("keys"));
    assert_eq!(keys, vec![a.clone(), b.clone()]);
    store.forget(&b, token_b).await.expect("forget b");
    for key in listed(store.keys().await.expect("keys")) {
        let loaded = store.load(&key).await.expect("load");
        assert_eq!(loaded.checkpoint.is_some(), key == a, "{key:?}");
    }
}

/// Declares one `#[test]` per contract case through the caller's runner.
#[macro_export]
macro_rules! checkpoint_contract {
    ($runner:path) => {
        $crate::checkpoint_contract!(
            $runner;
            a_new_binding_has_no_checkpoint,
            a_save_is_what_the_next_load_sees,
            a_stale_token_conflicts_and_writes_nothing,
            a_second_writer_is_fenced_at_every_step,
            forget_drops_the_checkpoint_and_fences_old_tokens,
            large_states_round_trip,
            keys_list_the_saved_bindings,
        );
    };
    ($runner:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $runner(stringify!($case), |store| Box::pin(contract::$case(store)));
            }
        )*
    };
}
