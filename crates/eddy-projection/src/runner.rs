//! What every runner (`run`, `follow`, `attach`) needs from its host:
//! a writer's session on a binding. A plain host's sessions commit units
//! by checkpoint or producer; a SQL host's commit each unit of a
//! transaction projection in one transaction of its own.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::declare::{Params, State};
use crate::session::{Session, Tally};
use crate::transaction::UnitTransaction;
use crate::{Bound, Host, Progress, Result, RunOptions, StreamCheckpoints};

/// Opens writers' sessions on bindings.
pub(crate) trait Opener<P, S>: Send + Sync + 'static {
    /// The storage and checkpoints the sessions work on.
    fn host(&self) -> &Host;

    /// Loads `bound`'s checkpoint into a session that commits its units.
    fn open(&self, bound: Bound<P, S>) -> BoxFuture<'static, Result<Session<P, S>>>;
}

impl<P: Params, S: State> Opener<P, S> for Host {
    fn host(&self) -> &Host {
        self
    }

    fn open(&self, bound: Bound<P, S>) -> BoxFuture<'static, Result<Session<P, S>>> {
        Box::pin(Session::load(self.clone(), bound))
    }
}

/// Makes the unit transaction of a binding of a transaction projection.
pub(crate) type MakeUnit<P> =
    Arc<dyn Fn(Bound<P, ()>) -> Arc<dyn UnitTransaction<P>> + Send + Sync>;

/// A SQL host's sessions: each unit of a transaction projection commits
/// in a transaction of `unit`'s.
pub(crate) struct InTransaction<P> {
    pub host: Host,
    pub unit: MakeUnit<P>,
}

impl<P: Params> Opener<P, ()> for InTransaction<P> {
    fn host(&self) -> &Host {
        &self.host
    }

    /// Opens a session; for a binding the table has no checkpoint of yet,
    /// claims it for the table first (refused when the store's checkpoint
    /// streams hold it).
    fn open(&self, bound: Bound<P, ()>) -> BoxFuture<'static, Result<Session<P, ()>>> {
        let unit = (self.unit)(bound.clone());
        let host = self.host.clone();
        Box::pin(async move {
            let key = bound.key.clone();
            let session = Session::load(host.clone(), bound).await?;
            if !session.has_checkpoint() {
                let streams = StreamCheckpoints::new(Arc::clone(&host.storage));
                streams.claim_for_table(&key).await?;
            }
            Ok(session.with_transaction(unit))
        })
    }
}

/// Runs `bound` until its inputs are caught up, closed, gone, or
/// `options.limit` units are committed (see [`Host::run`]).
pub(crate) async fn run_on<P: Params, S: State>(
    opener: &dyn Opener<P, S>,
    bound: &Bound<P, S>,
    options: RunOptions,
) -> Result<Progress<S>> {
    options.validate()?;
    let mut session = opener.open(bound.clone()).await?;
    let mut tally = Tally::default();
    let pass = session
        .pass(options.limit, options.bounds(), &mut tally)
        .await?;
    Ok(session.progress(tally, pass))
}
