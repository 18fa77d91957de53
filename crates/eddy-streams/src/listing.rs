//! Listing in pages: [`ListPage`], what
//! [`Storage::list_page`](crate::Storage::list_page) answers, and
//! [`PathPage`], what [`Storage::list_paths_page`](crate::Storage::list_paths_page)
//! answers.

use crate::StreamInfo;

/// The most streams one page holds, whatever a caller asks for.
pub const MAX_LIST_PAGE: usize = 1000;

/// One page of a listing, sorted by path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The live streams of the page.
    pub streams: Vec<StreamInfo>,
    /// Where the next page starts (pass it as `after`); `None` on the
    /// last page. A page may hold fewer streams than asked for and still
    /// have a next one (streams that expired or were deleted take up
    /// room in a store's own pages).
    pub next: Option<String>,
}

impl ListPage {
    /// The page of `listed` (every stream under a prefix, sorted by path)
    /// after `after`, of at most `limit` streams (at least one, at most
    /// [`MAX_LIST_PAGE`]).
    pub fn of(listed: Vec<StreamInfo>, after: Option<&str>, limit: usize) -> ListPage {
        let limit = limit.clamp(1, MAX_LIST_PAGE);
        let mut streams: Vec<StreamInfo> = listed
            .into_iter()
            .filter(|info| after.is_none_or(|after| info.path.as_str() > after))
            .take(limit + 1)
            .collect();
        let next = if streams.len() > limit {
            streams.truncate(limit);
            streams.last().map(|info| info.path.to_string())
        } else {
            None
        };
        ListPage { streams, next }
    }
}

/// One page of a listing of paths alone, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathPage {
    /// The paths of the page: every live stream's in its range, and on a
    /// store that lists paths without reading records (DynamoDB) also
    /// those of streams that expired, or were deleted while forks still
    /// read them, and are not removed yet. A caller that needs to know
    /// asks the stream.
    pub paths: Vec<String>,
    /// Where the next page starts (pass it as `after`); `None` on the
    /// last page.
    pub next: Option<String>,
}

impl From<ListPage> for PathPage {
    fn from(page: ListPage) -> Self {
        PathPage {
            paths: page.streams.into_iter().map(|info| info.path).collect(),
            next: page.next,
        }
    }
}
