//! Listing in pages: [`ListPage`], what
//! [`Storage::list_page`](crate::Storage::list_page) answers.

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
