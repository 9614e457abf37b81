//! Errors as OpenAI's API shapes them: a status code and the body
//! `{"error": {"message", "type", "param", "code"}}`, which the official
//! clients turn into their typed exceptions (`BadRequestError`,
//! `NotFoundError`, `RateLimitError`, ...). Every way a request can fail
//! ends here; nothing a client sends makes the server panic.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// One failed request.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before trying again (429 and 503).
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: a request the server understood but cannot run.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the parameter at fault.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(message).with_param(param)
    }

    /// 400: a body that is not the JSON the endpoint takes.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::invalid(message).with_code("invalid_json")
    }

    /// 404: a model this server does not serve.
    pub fn unknown_model(model: &str, served: &[String]) -> Self {
        let list = if served.is_empty() {
            "none".to_string()
        } else {
            served.join(", ")
        };
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist here; this server serves: {list}"),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    /// 404: a path with no endpoint.
    pub fn no_route(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown request URL: {method} {path}"),
        )
        .with_code("unknown_url")
    }

    /// 405.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("Method {method} is not allowed on {path}"),
        )
        .with_code("method_not_allowed")
    }

    /// 413: a body over the limit.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than {limit} bytes"),
        )
        .with_code("request_too_large")
    }

    /// 400: an input longer than the model takes.
    pub fn too_long(param: &str, message: impl Into<String>) -> Self {
        Self::bad_param(param, message).with_code("context_length_exceeded")
    }

    /// 429 with `Retry-After`: the queue is full.
    pub fn queue_full(what: &str, retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!("The {what} queue is full; try again in {retry_after} s"),
        )
        .with_code("rate_limit_exceeded");
        e.retry_after = Some(retry_after);
        e
    }

    /// 503: the server is stopping, or a worker is gone.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message);
        e.retry_after = Some(1);
        e
    }

    /// 500: the model failed on a request it had accepted.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::to_string(&Body {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_else(|_| {
            r#"{"error":{"message":"error","type":"server_error","param":null,"code":null}}"#.into()
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            self.body(),
        )
            .into_response();
        if let Some(s) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}
