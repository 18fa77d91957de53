//! Wake streams and `attach`.

use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{
    wake, wake_stream, AttachOptions, Host, RunOptions, Status, WakeRow, WAKE_COLLECTION,
};
use eddy_streams::{Append, JsonStream, Route, Storage};
use serde::{Deserialize, Serialize};

use crate::support::{read_all, Order, Total};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct File {
    file_id: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Workspace {
    workspace_id: String,
}

mod cases {
    use super::*;

    pub async fn wake_keeps_one_row_per_source(store: Arc<dyn Storage>) {
        let wakes = wake_stream("Files/Wake", "files-wake").expect("wake stream");
        let projection = wake::<File>(
            "files-wake",
            Route::new("files/:fileId").expect("route"),
            &wakes,
        )
        .expect("declare");
        let host = Host::new(store.clone());
        let file =
            JsonStream::<serde_json::Value>::new("Files/File", "files/:fileId").expect("route");
        let mut bounds = Vec::new();
        for id in ["a", "b"] {
            let params = File { file_id: id.into() };
            file.create(store.as_ref(), &params).await.expect("create");
            file.append(
                store.as_ref(),
                &params,
                &[serde_json::json!(1), serde_json::json!(2)],
            )
            .await
            .expect("append");
            let bound = projection.at(params).expect("bind");
            host.run(&bound, RunOptions::default()).await.expect("run");
            bounds.push(bound);
        }
        let rows = || async {
            wakes
                .materialize(store.as_ref(), &())
                .await
                .expect("materialize")
                .rows::<WakeRow>(WAKE_COLLECTION)
                .expect("rows")
        };
        let now = rows().await;
        assert_eq!(now.len(), 2);
        assert_eq!(now["files/a"].offset.position(), 2);
        assert_eq!(now["files/a"].closed, None);

        store
            .append(&bounds[0].input_paths()[0], Append::close_only())
            .await
            .expect("close");
        host.run(&bounds[0], RunOptions::default())
            .await
            .expect("closed");
        assert_eq!(rows().await["files/a"].closed, Some(true));

        store
            .delete(&bounds[1].input_paths()[0])
            .await
            .expect("delete");
        let last = host
            .run(&bounds[1], RunOptions::default())
            .await
            .expect("gone");
        assert_eq!(last.status, Status::Forgotten);
        let after = rows().await;
        assert_eq!(after.keys().collect::<Vec<_>>(), ["files/a"]);
    }

    pub async fn attach_runs_bindings_selected_by_commits(store: Arc<dyn Storage>) {
        let facts = JsonStream::<Order>::new("Shop/Facts", "facts/:workspaceId").expect("route");
        let totals = JsonStream::<Total>::new("Shop/Totals", "totals/:workspaceId").expect("route");
        let projection = eddy_projection::Declare::<Workspace, Order>::new("by-workspace")
            .input("facts", &facts)
            .output("output", &totals)
            .emit(eddy_projection::Commit::producer(), |entry, _| {
                eddy_projection::Emits::new().json(
                    "output",
                    [Total {
                        order_id: entry.item.order_id.clone(),
                        total: entry.item.amount,
                    }],
                )
            })
            .expect("declare");
        let host = Host::new(store.clone());
        let attached = host
            .attach(&projection, AttachOptions::default())
            .expect("attach");
        for ws in ["w1", "w2"] {
            let params = Workspace {
                workspace_id: ws.into(),
            };
            facts.create(store.as_ref(), &params).await.expect("create");
            for i in 0..3 {
                facts
                    .append(store.as_ref(), &params, &[crate::support::order(i, 1.0)])
                    .await
                    .expect("append");
            }
        }
        for ws in ["w1", "w2"] {
            let params = Workspace {
                workspace_id: ws.into(),
            };
            let mut written = Vec::new();
            for _ in 0..200 {
                if totals.path(&params).is_ok()
                    && store
                        .head(&totals.path(&params).expect("path"))
                        .await
                        .is_ok()
                {
                    written = read_all(store.as_ref(), &totals, &params).await;
                    if written.len() == 3 {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(written.len(), 3, "workspace {ws}");
        }
        drop(attached);
    }

    pub async fn attach_needs_inputs_that_supply_every_param(store: Arc<dyn Storage>) {
        let orders = crate::support::orders();
        let projection = eddy_projection::Declare::<Workspace, Order>::new("shared-input")
            .input("orders", &orders)
            .fold(0.0, |s, e, _| s + e.item.amount)
            .expect("declare");
        let host = Host::new(store);
        let err = host
            .attach(&projection, AttachOptions::default())
            .expect_err("refused");
        assert_eq!(err.code(), "load/invalid-options");
    }
}

crate::on_backends!(
    wake_keeps_one_row_per_source,
    attach_runs_bindings_selected_by_commits,
    attach_needs_inputs_that_supply_every_param,
);
