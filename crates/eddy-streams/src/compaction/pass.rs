//! A compaction pass: what it keeps of each message it meets, going
//! backwards from the tail.

use super::*;

/// What a compaction pass decides about one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It stays.
    Keep,
    /// It goes.
    Drop,
    /// It goes, and it is a delete past its lifetime: a reader that read
    /// an earlier change of its row but not it keeps the row.
    DropDelete,
}

/// Deletes past their lifetime that some drops of a pass take out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeletesDropped {
    /// How many.
    pub count: u64,
    /// The position after the highest of them.
    pub below: u64,
}

impl DeletesDropped {
    /// These and the one at `position`.
    pub fn and(self, position: u64) -> Self {
        DeletesDropped {
            count: self.count + 1,
            below: self.below.max(position + 1),
        }
    }
}

/// The part of a state message compaction looks at.
#[derive(Deserialize)]
struct Shape {
    #[serde(rename = "type")]
    collection: Option<String>,
    key: Option<String>,
    headers: Option<ShapeHeaders>,
}

#[derive(Deserialize)]
struct ShapeHeaders {
    operation: Option<String>,
    control: Option<String>,
}

/// A message as compaction sees it.
enum Kind {
    Change {
        row: (String, String),
        delete: bool,
    },
    Reset,
    SnapshotStart,
    SnapshotEnd,
    /// Anything else: never dropped.
    Other,
}

fn kind(message: &[u8]) -> Kind {
    let Ok(shape) = serde_json::from_slice::<Shape>(message) else {
        return Kind::Other;
    };
    let Some(headers) = shape.headers else {
        return Kind::Other;
    };
    match (headers.operation.as_deref(), headers.control.as_deref()) {
        (Some(operation), None) => {
            let (Some(collection), Some(key)) = (shape.collection, shape.key) else {
                return Kind::Other;
            };
            let delete = match operation {
                "delete" => true,
                "insert" | "update" | "upsert" => false,
                _ => return Kind::Other,
            };
            Kind::Change {
                row: (collection, key),
                delete,
            }
        }
        (None, Some("reset")) => Kind::Reset,
        (None, Some("snapshot-start")) => Kind::SnapshotStart,
        (None, Some("snapshot-end")) => Kind::SnapshotEnd,
        _ => Kind::Other,
    }
}

/// One compaction pass of one stream: what it learned reading the stream
/// backwards from the tail it started at.
#[derive(Debug)]
pub(crate) struct Pass {
    /// The stream's path and incarnation.
    pub path: String,
    pub incarnation: u64,
    /// The stream's count when the pass started: it looks below.
    pub tail: u64,
    /// The pass looked at every message from here to `tail`.
    pub cursor: u64,
    /// The end of what it may drop, before the byte bound.
    end: u64,
    /// The size of the messages it passed, for the byte bound.
    passed_bytes: u64,
    /// Whether the byte bound's head ended.
    past_bytes: bool,
    /// The end of what it may drop (the byte bound included), once known.
    pub compactable_end: Option<u64>,
    /// The rows met, by (collection, key).
    rows: HashSet<(String, String)>,
    /// Whether a reset was met.
    after_reset: bool,
    /// Whether the last snapshot control before the reset was met.
    snapshot_met: bool,
    /// Messages kept below `compactable_end`.
    pub kept: u64,
    /// When the oldest delete kept may go.
    pub delete_due_ms: Option<i64>,
    /// When the pass started, in unix ms: deletes age against it.
    now_ms: i64,
}

impl Pass {
    /// A pass over the stream's messages below `count` at `now_ms`.
    pub fn new(
        path: &str,
        incarnation: u64,
        policy: &Compaction,
        marks: &[AgeMark],
        count: u64,
        now_ms: i64,
    ) -> Self {
        Pass {
            path: path.to_owned(),
            incarnation,
            tail: count,
            cursor: count,
            end: policy.end_before_bytes(marks, count, now_ms),
            passed_bytes: 0,
            past_bytes: policy.lag_bytes.is_none(),
            compactable_end: None,
            rows: HashSet::new(),
            after_reset: false,
            snapshot_met: false,
            kept: 0,
            delete_due_ms: None,
            now_ms,
        }
    }

    /// The end of what the pass may drop: the byte bound's part is known
    /// once the pass went past it.
    pub fn end(&self) -> u64 {
        self.compactable_end.unwrap_or(self.end)
    }

    /// Decides about the message at `position`, the one before the last
    /// one passed. `appended_by_ms` is when it was appended at the latest
    /// (`None`: not known, taken as now).
    pub fn examine(
        &mut self,
        policy: &Compaction,
        position: u64,
        message: &[u8],
        appended_by_ms: Option<i64>,
    ) -> Verdict {
        self.cursor = position;
        self.passed_bytes = self.passed_bytes.saturating_add(message.len() as u64);
        if !self.past_bytes {
            // The byte bound keeps the newest messages up to its size.
            if policy
                .lag_bytes
                .is_some_and(|keep| self.passed_bytes > keep)
            {
                self.past_bytes = true;
                self.compactable_end = Some(self.end.min(position + 1));
            }
        } else if self.compactable_end.is_none() {
            self.compactable_end = Some(self.end);
        }
        let in_head = position >= self.end() || !self.past_bytes;
        let verdict = self.decide(policy, kind(message), in_head, appended_by_ms);
        if verdict == Verdict::Keep && !in_head {
            self.kept += 1;
        }
        verdict
    }

    fn decide(
        &mut self,
        policy: &Compaction,
        kind: Kind,
        in_head: bool,
        appended_by_ms: Option<i64>,
    ) -> Verdict {
        let keep_if = |keep: bool| {
            if keep || in_head {
                Verdict::Keep
            } else {
                Verdict::Drop
            }
        };
        if self.after_reset {
            // Before the last reset: everything but the last snapshot
            // control when it opens a snapshot (a reader's snapshot state
            // after the reset is what that one left).
            return match kind {
                Kind::Other => Verdict::Keep,
                Kind::SnapshotStart | Kind::SnapshotEnd => {
                    let last = !self.snapshot_met;
                    self.snapshot_met = true;
                    keep_if(last && matches!(kind, Kind::SnapshotStart))
                }
                Kind::Change { .. } | Kind::Reset => keep_if(false),
            };
        }
        match kind {
            Kind::Other | Kind::SnapshotStart | Kind::SnapshotEnd => Verdict::Keep,
            Kind::Reset => {
                self.after_reset = true;
                Verdict::Keep
            }
            Kind::Change { row, delete } => {
                if self.rows.contains(&row) {
                    return keep_if(false);
                }
                self.rows.insert(row);
                if !delete {
                    return Verdict::Keep;
                }
                let due = appended_by_ms
                    .unwrap_or(self.now_ms)
                    .saturating_add(policy.deletes_ms());
                if due <= self.now_ms && !in_head {
                    return Verdict::DropDelete;
                }
                if !in_head {
                    self.delete_due_ms = Some(self.delete_due_ms.map_or(due, |d| d.min(due)));
                }
                Verdict::Keep
            }
        }
    }

    /// What the stream keeps once the pass looked at every message.
    pub fn finish(&self, dropped_before: u64) -> Compacted {
        // A stream within the byte bound: nothing was compactable.
        let end = if self.past_bytes {
            self.end()
        } else {
            self.cursor.min(self.end)
        };
        Compacted {
            end,
            kept: self.kept,
            tail: self.tail,
            dropped: dropped_before,
            delete_due_ms: self.delete_due_ms,
            ..Compacted::default()
        }
    }
}

/// When the message at `position` was appended at the latest, as the age
/// marks tell (`None` past the last mark).
pub(crate) fn appended_by_ms(marks: &[AgeMark], position: u64) -> Option<i64> {
    marks
        .iter()
        .find(|mark| mark.end > position)
        .map(|mark| mark.ms)
}
