//! Pages of the lists shown newest first (the panel's lists and its CSV
//! exports), cut by id rather than by offset: a page holds the rows below
//! the previous page's last id, so rows added while someone pages (they get
//! higher ids) never shift the next page, no row is skipped or shown twice,
//! and the database reads only the page, however far back it is.

use sea_orm::{
    ColumnTrait, Condition, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait, Func, LikeExpr},
};

/// A LIKE pattern for values that contain `text`. `!` escapes the
/// wildcards (a backslash means different things to different backends'
/// string literals).
pub fn containing(text: &str) -> LikeExpr {
    let escaped: String = text
        .chars()
        .flat_map(|c| match c {
            '%' | '_' | '!' => vec!['!', c],
            _ => vec![c],
        })
        .collect();
    LikeExpr::new(format!("%{escaped}%")).escape('!')
}

/// Rows one of whose `columns` contains `text`, ignoring case (LIKE's own
/// case rule differs between the backends, so both sides are lower-cased).
pub fn any_contains<C: ColumnTrait>(columns: &[C], text: &str) -> Condition {
    let text = text.to_lowercase();
    columns.iter().fold(Condition::any(), |any, column| {
        any.add(Expr::expr(Func::lower(Expr::col(*column))).like(containing(&text)))
    })
}

/// Which page of a list: at most `size` rows with an id below `before`,
/// or from the newest when `before` is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyset {
    pub before: Option<i64>,
    pub size: u64,
}

/// One page of a list, newest first.
#[derive(Debug, Clone)]
pub struct Listed<T> {
    pub rows: Vec<T>,
    /// Where the next, older page starts: `before` of its [`Keyset`];
    /// `None` on the oldest page.
    pub older: Option<i64>,
}

impl Keyset {
    /// The newest `size` rows.
    pub fn first(size: u64) -> Keyset {
        Keyset { before: None, size }
    }

    /// `query` narrowed to this page by its `id` column: ids below
    /// `before`, newest first, and one row more than the page holds, read
    /// only to tell whether an older page follows ([`Keyset::cut`]).
    pub fn select<Q, C>(&self, query: Q, id: C) -> Q
    where
        Q: QueryFilter + QueryOrder + QuerySelect,
        C: ColumnTrait + Copy,
    {
        let query = match self.before {
            Some(before) => query.filter(id.lt(before)),
            None => query,
        };
        query.order_by_desc(id).limit(self.size + 1)
    }

    /// The rows a [`Keyset::select`] query read, cut to the page.
    pub fn cut<T>(&self, mut rows: Vec<T>, id: impl Fn(&T) -> i64) -> Listed<T> {
        let more = rows.len() as u64 > self.size;
        rows.truncate(self.size as usize);
        let older = rows.last().map(id).filter(|_| more);
        Listed { rows, older }
    }
}

impl<T> Default for Listed<T> {
    /// No row.
    fn default() -> Self {
        Listed {
            rows: Vec::new(),
            older: None,
        }
    }
}

impl<T> Listed<T> {
    /// The same page with each row converted.
    pub fn try_map<U, E>(self, convert: impl FnMut(T) -> Result<U, E>) -> Result<Listed<U>, E> {
        Ok(Listed {
            rows: self
                .rows
                .into_iter()
                .map(convert)
                .collect::<Result<_, _>>()?,
            older: self.older,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_says_where_the_older_one_starts() {
        let page = Keyset::first(2);
        let full = page.cut(vec![9, 7, 4], |id| *id);
        assert_eq!((full.rows, full.older), (vec![9, 7], Some(7)));
        let last = page.cut(vec![3, 1], |id| *id);
        assert_eq!((last.rows, last.older), (vec![3, 1], None));
    }
}
