//! `inspect`: a binding's failed run shows with its error until a unit
//! settles again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use eddy_projection::{inspect, BindingHealth, Commit, Declare, Host, RunOptions, Step};
use eddy_streams::Storage;

use crate::support::{numbers, on_every_backend};

#[test]
fn a_failed_run_shows_its_error_until_a_unit_settles() {
    on_every_backend(
        "a_failed_run_shows_its_error_until_a_unit_settles",
        |store| Box::pin(failed_then_fixed(store)),
    );
}

async fn failed_then_fixed(store: Arc<dyn Storage>) {
    let numbers = numbers();
    numbers.create(store.as_ref(), &()).await.expect("create");
    numbers
        .append(store.as_ref(), &(), &[1, 2, 3])
        .await
        .expect("append");
    let refusing = Arc::new(AtomicBool::new(true));
    let declare = Declare::<()>::new("mailer");
    let input = declare.input("numbers", &numbers);
    let flag = Arc::clone(&refusing);
    let mailer = declare
        .process_each(Commit::at_least_once())
        .on(input, move |_, _| {
            if flag.load(Ordering::SeqCst) {
                Step::fail("the mail server refused")
            } else {
                Step::from(())
            }
        })
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    let host = Host::new(Arc::clone(&store));

    let failed = host.run(&mailer, RunOptions::default()).await;
    assert_eq!(failed.expect_err("refused").code(), "handler/failed");
    let reports = inspect(&store).await.expect("inspect");
    let [report] = reports.as_slice() else {
        panic!("one binding: {reports:?}");
    };
    assert_eq!(report.state, BindingHealth::Failed);
    assert!(report.pending.is_some(), "{report:?}");
    let failure = report.failure.as_ref().expect("the failure is kept");
    assert_eq!(failure.code, "handler/failed");
    assert!(
        failure.message.contains("the mail server refused"),
        "{failure:?}"
    );
    assert!(failure.at_ms > 0);

    refusing.store(false, Ordering::SeqCst);
    let progress = host
        .run(&mailer, RunOptions::default())
        .await
        .expect("runs once fixed");
    assert_eq!(progress.items, 3);
    let reports = inspect(&store).await.expect("inspect");
    assert_eq!(reports[0].state, BindingHealth::CaughtUp, "{reports:?}");
    assert!(reports[0].failure.is_none(), "{reports:?}");
}
