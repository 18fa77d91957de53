//! Every item a query finds, page after page.

use eddy_dynamo::{Item, Query, Table};
use eddy_streams::StreamError;

use crate::errors::table_error;

/// The items of every page of `query`; `doing` names the read in errors.
pub(crate) async fn all_items(
    table: &dyn Table,
    mut query: Query,
    doing: &str,
) -> Result<Vec<Item>, StreamError> {
    let mut items = Vec::new();
    loop {
        let page = table
            .query(query.clone())
            .await
            .map_err(|e| table_error(doing, e))?;
        items.extend(page.items);
        match page.last_evaluated_key {
            Some(last) => query = query.start_after(Some(last)),
            None => return Ok(items),
        }
    }
}
