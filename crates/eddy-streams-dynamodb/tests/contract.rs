//! The `Storage` contract of eddy-streams, every case, on the DynamoDB
//! backend: over the embedded table, and (feature `aws`) over moto.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use eddy_dynamo::Table;
use eddy_streams::backend::RecordOptions;
use eddy_streams::{ManualClock, Storage};

use crate::common;

#[path = "../../eddy-streams/tests/contract/cases.rs"]
#[allow(dead_code, unused_macros, unused_imports)]
pub(crate) mod cases;
#[path = "../../eddy-streams/tests/contract/snapshots.rs"]
#[allow(dead_code)]
mod snapshots;

type Test = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The store on `table`, reading the time from `clock`, with the
/// contract's producer limit.
fn store(table: Arc<dyn Table>, clock: Arc<ManualClock>) -> Arc<dyn Storage> {
    let options = RecordOptions {
        clock,
        max_producers_per_stream: cases::MAX_PRODUCERS,
        limits: cases::LIMITS,
        ..eddy_streams_dynamodb::options()
    };
    Arc::new(eddy_streams_dynamodb::open(table, options).expect("open"))
}

fn on_embedded(name: &str, case: impl Fn(Arc<dyn Storage>, Arc<ManualClock>) -> Test) {
    eprintln!("contract case `{name}` on dynamodb (embedded table)");
    common::runtime().block_on(async {
        let clock = Arc::new(ManualClock::starting_now());
        case(store(common::embedded(), clock.clone()), clock).await;
    });
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_embedded(stringify!($name), |store, _| Box::pin(cases::$name(store)));
            }
        )*
    };
}

macro_rules! clocked_contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_embedded(stringify!($name), |store, clock| Box::pin(cases::$name(store, clock)));
            }
        )*
    };
}

macro_rules! snapshot_contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_embedded(stringify!($name), |store, _| Box::pin(snapshots::$name(store)));
            }
        )*
    };
}

cases::every_case!(contract);
cases::every_clocked_case!(clocked_contract);
cases::every_sweeping_case!(clocked_contract);
cases::every_retention_case!(clocked_contract);
cases::every_compaction_case!(clocked_contract);
cases::every_producer_sweeping_case!(clocked_contract);
snapshots::every_snapshot_case!(snapshot_contract);

/// Two stores on one embedded table, as two processes would share a
/// table, share their documents.
#[test]
fn documents_are_shared_by_two_stores_on_one_table() {
    common::runtime().block_on(async {
        let table = common::embedded();
        let clock = Arc::new(ManualClock::starting_now());
        let (a, b) = (
            store(Arc::clone(&table), clock.clone()),
            store(table, clock),
        );
        cases::documents_are_shared_by_stores_on_one_database(a, b).await;
    });
}

/// Every case again on moto, each on a table of its own.
#[cfg(feature = "aws")]
mod moto {
    use std::sync::Arc;

    use eddy_streams::{ManualClock, Storage};

    use super::{cases, snapshots, store, Test};
    use crate::common;

    fn on_moto(name: &str, case: impl FnOnce(Arc<dyn Storage>, Arc<ManualClock>) -> Test) {
        common::runtime().block_on(async {
            let Some(table) = common::moto().await else {
                return;
            };
            eprintln!("contract case `{name}` on dynamodb (moto)");
            let clock = Arc::new(ManualClock::starting_now());
            case(store(table, clock.clone()), clock).await;
        });
    }

    macro_rules! moto_contract {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_moto(stringify!($name), |store, _| Box::pin(cases::$name(store)));
                }
            )*
        };
    }

    macro_rules! moto_clocked_contract {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_moto(stringify!($name), |store, clock| Box::pin(cases::$name(store, clock)));
                }
            )*
        };
    }

    macro_rules! moto_snapshot_contract {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_moto(stringify!($name), |store, _| Box::pin(snapshots::$name(store)));
                }
            )*
        };
    }

    cases::every_case!(moto_contract);
    cases::every_clocked_case!(moto_clocked_contract);
    cases::every_sweeping_case!(moto_clocked_contract);
    cases::every_retention_case!(moto_clocked_contract);
    cases::every_compaction_case!(moto_clocked_contract);
    cases::every_producer_sweeping_case!(moto_clocked_contract);
    snapshots::every_snapshot_case!(moto_snapshot_contract);

    /// Two stores on one moto table share their documents.
    #[test]
    fn documents_are_shared_by_two_stores_on_one_table() {
        common::runtime().block_on(async {
            let Some(table) = common::moto().await else {
                return;
            };
            let clock = Arc::new(ManualClock::starting_now());
            let (a, b) = (
                store(Arc::clone(&table), clock.clone()),
                store(table, clock),
            );
            cases::documents_are_shared_by_stores_on_one_database(a, b).await;
        });
    }
}
