//! The plain-text answers every handler shares.

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use crate::{Body, full};

/// A plain-text answer as Go's http.Error writes it.
pub fn text_response(status: StatusCode, text: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut resp = plain_response(status, full(text));
    resp.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// A `text/plain` answer with a body of any kind (a log that streams).
pub fn plain_response(status: StatusCode, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
