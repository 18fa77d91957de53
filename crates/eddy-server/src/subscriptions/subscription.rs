//! One subscription as its document stores it: what it watches, its
//! delivery, its wake and lease, and the rules that move them (which
//! streams it watches, what is pending, when a listing drops a stream);
//! and [`Watch`], what a server keeps of it to see which commits concern
//! it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use eddy_streams::Offset;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::listing::Want;
use super::{pattern, token};

/// The wall clock in unix milliseconds: leases and retry times are
/// compared across servers (keep their clocks in sync).
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Where a webhook subscription delivers, and the public origin its
/// callback and JWKS URLs start with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Target {
    pub(super) url: String,
    /// `http://host`, from the request that made the subscription.
    pub(super) origin: String,
}

#[cfg(feature = "webhooks")]
impl Target {
    /// The public URL of `rest` under the subscription API of `base_path`.
    pub(super) fn public_url(&self, base_path: &str, rest: &str) -> String {
        let base = if base_path.is_empty() {
            String::new()
        } else {
            format!("/{base_path}")
        };
        format!("{}{base}/__ds/{rest}", self.origin)
    }
}

/// How a subscription delivers wakes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub(super) enum Delivery {
    /// Kept by every build: a server without the `webhooks` feature
    /// describes one but cannot deliver it.
    Webhook(Target),
    PullWake {
        wake_stream: String,
    },
}

impl Delivery {
    /// The stream the server appends wake events to, for a pull-wake
    /// subscription.
    pub(super) fn wake_stream(&self) -> Option<&str> {
        match self {
            Delivery::Webhook(_) => None,
            Delivery::PullWake { wake_stream } => Some(wake_stream),
        }
    }
}

/// Why a stream belongs to a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Link {
    Pattern,
    Explicit,
}

impl Link {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Link::Pattern => "pattern",
            Link::Explicit => "explicit",
        }
    }
}

/// One watched stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Watched {
    pub(super) link: Link,
    pub(super) tail: Offset,
    pub(super) acked: Offset,
    /// When a commit of it was last recorded (unix ms; 0: never): a
    /// stream recorded after a listing began is not dropped for missing
    /// from it.
    #[serde(default)]
    pub(super) seen_ms: u64,
}

impl Watched {
    /// A stream watched from `tail` on: data there is acknowledged.
    pub(super) fn from(link: Link, tail: Offset) -> Self {
        Watched {
            link,
            tail,
            acked: tail,
            seen_ms: 0,
        }
    }
}

/// The wake in progress: who holds it and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ActiveWake {
    pub(super) wake_id: String,
    pub(super) generation: u64,
    pub(super) token: String,
    /// The pull-wake worker that claimed it (`None` for a webhook's).
    pub(super) holder: Option<String>,
    /// When its lease ends (unix ms); after that any server may begin
    /// the next generation.
    pub(super) expires_ms: u64,
}

impl ActiveWake {
    /// A new wake generation of `sub`, with fresh random ids; fails when
    /// the OS random number generator does (no guessable fallback).
    pub(super) fn begin(
        sub: &mut Subscription,
        holder: Option<String>,
    ) -> Result<Self, getrandom::Error> {
        let wake_id = token::token()?;
        let token = token::token()?;
        sub.generation += 1;
        Ok(ActiveWake {
            wake_id,
            generation: sub.generation,
            token,
            holder,
            expires_ms: now_ms().saturating_add(sub.lease_ttl_ms),
        })
    }

    /// Whether a request names this wake and carries its token (compared
    /// in constant time).
    pub(super) fn is(&self, wake_id: &str, generation: u64, token: Option<&str>) -> bool {
        let token = token.unwrap_or("").as_bytes();
        self.wake_id == wake_id
            && self.generation == generation
            && bool::from(self.token.as_bytes().ct_eq(token))
    }
}

/// Where a pull-wake subscription's wake event is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub(super) enum Post {
    /// None is owed, or the last was claimed.
    #[default]
    None,
    /// A server is appending one; another may take over after `until_ms`
    /// (the first may have died before it appended).
    Posting { until_ms: u64 },
    /// Appended and not yet claimed.
    Posted,
}

/// One subscription, as its document stores it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Subscription {
    pub(super) id: String,
    /// The stream path prefix its paths are relative to (`v1/stream`).
    pub(super) base_path: String,
    pub(super) delivery: Delivery,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) pattern: Option<pattern::Pattern>,
    pub(super) lease_ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<String>,
    /// A hash of the create request, to recognise an idempotent re-create
    /// without keeping the request.
    pub(super) fingerprint: String,
    /// The bytes it keeps, counted against `max_subscription_bytes`: its
    /// create request, and the paths of streams added to it later.
    pub(super) stored_bytes: usize,
    pub(super) streams: BTreeMap<String, Watched>,
    pub(super) generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) wake: Option<ActiveWake>,
    #[serde(default)]
    pub(super) post: Post,
    /// Wakes (webhook notifications, pull-wake appends) that failed in a
    /// row: sets the retry delay.
    #[serde(default)]
    pub(super) failures: u32,
    /// No wake is begun before this time (unix ms) after a failure.
    #[serde(default)]
    pub(super) retry_at_ms: u64,
}

/// The most bytes a subscription's watched streams take in its document:
/// with its request (at most `max_subscription_bytes`) and the rest it
/// keeps, the document stays under the store's
/// [`MAX_DOCUMENT_BYTES`](eddy_streams::MAX_DOCUMENT_BYTES). A stream of
/// its pattern past it is left out (as past `max_subscription_matches`);
/// an explicit one is refused.
pub(super) const MAX_WATCHED_BYTES: usize = 192 * 1024;

/// What a watched stream at `path` takes in the document: its path, and
/// about this much for its link, offsets and time as JSON.
fn watched_bytes(path: &str) -> usize {
    path.len() + 128
}

/// The full store path of a path relative to a subscription's base.
pub(super) fn joined(base_path: &str, relative: &str) -> String {
    if base_path.is_empty() {
        relative.to_owned()
    } else {
        format!("{base_path}/{relative}")
    }
}

/// The prefix of the store paths under a subscription base.
pub(super) fn prefix(base_path: &str) -> String {
    if base_path.is_empty() {
        String::new()
    } else {
        format!("{base_path}/")
    }
}

impl Subscription {
    /// The full store path of a path relative to the base.
    pub(super) fn full_path(&self, relative: &str) -> String {
        joined(&self.base_path, relative)
    }

    /// The path relative to the base, if the full path is under it.
    pub(super) fn relative<'a>(&self, full: &'a str) -> Option<&'a str> {
        relative_to(&self.base_path, full)
    }

    pub(super) fn watches(&self, relative: &str) -> Option<Link> {
        match self.streams.get(relative) {
            Some(watched) => Some(watched.link),
            None => self
                .pattern
                .as_ref()
                .filter(|p| p.matches(relative))
                .map(|_| Link::Pattern),
        }
    }

    /// Records that the stream at `relative` has data up to `tail` (seen
    /// at `seen_ms`), starting to watch it if it is new. Returns `false`,
    /// and leaves it out, when it is a new stream of the pattern and the
    /// subscription watches `max_matches` of those already.
    pub(super) fn track(
        &mut self,
        relative: &str,
        link: Link,
        tail: Offset,
        seen_ms: u64,
        max_matches: usize,
    ) -> bool {
        if link == Link::Pattern
            && !self.streams.contains_key(relative)
            && (self.matched() >= max_matches || !self.fits([relative]))
        {
            return false;
        }
        let watched = self.streams.entry(relative.to_owned()).or_insert(Watched {
            link,
            tail: Offset::ZERO,
            acked: Offset::ZERO,
            seen_ms,
        });
        watched.tail = watched.tail.max(tail);
        watched.seen_ms = watched.seen_ms.max(seen_ms);
        true
    }

    /// What a listing of its base does with the stream at `full` (a
    /// store path): reads one it watches, and another match of its
    /// pattern too when it has `room` for more, else keeps that as a
    /// candidate (the listing may find some it watches gone).
    pub(super) fn wants(&self, full: &str, room: bool) -> Want {
        let Some(relative) = self.relative(full) else {
            return Want::Skip;
        };
        if self.streams.contains_key(relative) {
            Want::Read
        } else if !self.pattern.as_ref().is_some_and(|p| p.matches(relative)) {
            Want::Skip
        } else if room {
            Want::Read
        } else {
            Want::Candidate
        }
    }

    /// Whether streams at `paths` fit beside the ones it watches in its
    /// document (see [`MAX_WATCHED_BYTES`]).
    pub(super) fn fits<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> bool {
        let watched: usize = self.streams.keys().map(|path| watched_bytes(path)).sum();
        let more: usize = paths.into_iter().map(watched_bytes).sum();
        watched + more <= MAX_WATCHED_BYTES
    }

    /// How many streams it watches because they match its pattern.
    pub(super) fn matched(&self) -> usize {
        self.streams
            .values()
            .filter(|w| w.link == Link::Pattern)
            .count()
    }

    /// Brings it up to date with the store's streams under its base, as
    /// listed from `listed_ms` on over the paths `covered`: tails move on,
    /// new matches are watched (up to `max_matches`), and streams of the
    /// pattern in that range that no longer exist are dropped (an
    /// explicitly listed one stays: its client named it; one recorded
    /// after the listing began stays too). Returns how many new matches
    /// were left out.
    pub(super) fn record(
        &mut self,
        infos: &[eddy_streams::StreamInfo],
        covered: &Covered,
        listed_ms: u64,
        max_matches: usize,
    ) -> usize {
        let present: std::collections::HashSet<&str> = infos
            .iter()
            .filter_map(|info| self.relative(&info.path))
            .collect();
        let base = self.base_path.clone();
        self.streams.retain(|path, watched| {
            watched.link == Link::Explicit
                || watched.seen_ms > listed_ms
                || present.contains(path.as_str())
                || !covered.holds(&joined(&base, path))
        });
        let mut left_out = 0;
        for info in infos {
            let Some(relative) = self.relative(&info.path).map(str::to_owned) else {
                continue;
            };
            if let Some(link) = self.watches(&relative) {
                if !self.track(&relative, link, info.tail, 0, max_matches) {
                    left_out += 1;
                }
            }
        }
        left_out
    }

    pub(super) fn pending(&self) -> Vec<(String, Offset, Offset)> {
        self.streams
            .iter()
            .filter(|(_, w)| w.tail > w.acked)
            .map(|(path, w)| (path.clone(), w.tail, w.acked))
            .collect()
    }

    pub(super) fn has_pending(&self) -> bool {
        self.streams.values().any(|w| w.tail > w.acked)
    }

    pub(super) fn wake_active(&self, now_ms: u64) -> bool {
        self.wake.as_ref().is_some_and(|w| w.expires_ms > now_ms)
    }
}

/// The path relative to `base_path`, if `full` is under it.
/// The store paths a listing went over: those after `after` (all, when
/// `None`) up to and including `through` (to the end, when `None`).
#[derive(Clone, Debug, Default)]
pub(super) struct Covered {
    pub(super) after: Option<String>,
    pub(super) through: Option<String>,
}

impl Covered {
    /// Whether the listing went over `path`.
    fn holds(&self, path: &str) -> bool {
        self.after.as_deref().is_none_or(|after| path > after)
            && self
                .through
                .as_deref()
                .is_none_or(|through| path <= through)
    }
}

pub(super) fn relative_to<'a>(base_path: &str, full: &'a str) -> Option<&'a str> {
    if base_path.is_empty() {
        Some(full)
    } else {
        full.strip_prefix(base_path)?.strip_prefix('/')
    }
}

/// What a server needs to know of a subscription to see which commits
/// concern it: its base, pattern and explicit streams.
#[derive(Clone, Debug)]
pub(super) struct Watch {
    pub(super) base_path: String,
    pub(super) pattern: Option<pattern::Pattern>,
    pub(super) explicit: BTreeSet<String>,
}

impl Watch {
    pub(super) fn of(sub: &Subscription) -> Self {
        Watch {
            base_path: sub.base_path.clone(),
            pattern: sub.pattern.clone(),
            explicit: sub
                .streams
                .iter()
                .filter(|(_, w)| w.link == Link::Explicit)
                .map(|(path, _)| path.clone())
                .collect(),
        }
    }

    /// The path relative to the base when the subscription watches it.
    pub(super) fn concerns<'a>(&self, full: &'a str) -> Option<&'a str> {
        let relative = relative_to(&self.base_path, full)?;
        let watched = self.explicit.contains(relative)
            || self.pattern.as_ref().is_some_and(|p| p.matches(relative));
        watched.then_some(relative)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern_subscription() -> Subscription {
        serde_json::from_value(serde_json::json!({
            "id": "s",
            "base_path": "app",
            "delivery": {"type": "pull-wake", "wake_stream": "wakes"},
            "pattern": "**",
            "lease_ttl_ms": 30000,
            "fingerprint": "f",
            "stored_bytes": 100,
            "streams": {},
            "generation": 0,
        }))
        .expect("a subscription")
    }

    /// A listing of part of the base drops the pattern's streams that it
    /// went over and did not find, and keeps those it did not go over.
    #[test]
    fn a_partial_listing_drops_only_what_it_went_over() {
        let mut sub = pattern_subscription();
        for path in ["a", "m", "z"] {
            assert!(sub.track(path, Link::Pattern, Offset::ZERO, 1, 100));
        }
        let covered = Covered {
            after: Some("app/b".into()),
            through: Some("app/n".into()),
        };
        // Nothing listed between app/b and app/n: app/m is gone.
        assert_eq!(sub.record(&[], &covered, 2, 100), 0);
        let left: Vec<&str> = sub.streams.keys().map(String::as_str).collect();
        assert_eq!(left, ["a", "z"]);
        // A listing of everything that finds nothing drops the rest.
        sub.record(&[], &Covered::default(), 3, 100);
        assert!(sub.streams.is_empty());
    }

    /// Regression: a subscription's document grew with every stream its
    /// pattern matched, and long paths could take it past the store's
    /// document limit, after which no change of it could be stored.
    #[test]
    fn the_streams_a_pattern_adds_keep_the_document_under_its_limit() {
        let mut sub = pattern_subscription();
        let mut left_out = 0;
        for n in 0..1000 {
            let path = format!("{n:04}/{}", "p".repeat(1000));
            if !sub.track(&path, Link::Pattern, Offset::ZERO, 1, 1000) {
                left_out += 1;
            }
        }
        assert!(left_out > 0, "every long path was taken");
        let encoded = serde_json::to_vec(&sub).expect("encode");
        assert!(
            encoded.len() + 16 * 1024 < eddy_streams::MAX_DOCUMENT_BYTES,
            "{} bytes",
            encoded.len()
        );
    }
}
