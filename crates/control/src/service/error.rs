//! [`Error`]: why the control plane refused a request, as every door sees it: its [`Code`]
//! (mapped once per door: a gRPC status in `grpc/rpc.rs`, an HTTP status in `rest/error.rs`,
//! also the dashboard's) and the message shown.

/// What kind of refusal an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The request is malformed or a field is invalid.
    InvalidArgument,
    /// What the request names does not exist.
    NotFound,
    /// What the request creates exists already.
    AlreadyExists,
    /// The write kept losing the registry's compare-and-set race.
    Aborted,
    /// What the project may not do (a cap, a missing prerequisite).
    FailedPrecondition,
    /// A defect inside the control plane (logged, answered without detail).
    Internal,
    /// The store or the node cannot serve the request now.
    Unavailable,
}

/// A refused control-plane request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
}

impl Error {
    /// An error of `code` saying `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// [`Code::InvalidArgument`].
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// [`Code::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    /// [`Code::AlreadyExists`].
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(Code::AlreadyExists, message)
    }

    /// [`Code::Aborted`].
    pub fn aborted(message: impl Into<String>) -> Self {
        Self::new(Code::Aborted, message)
    }

    /// [`Code::FailedPrecondition`].
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }

    /// [`Code::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// [`Code::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Code::Unavailable, message)
    }

    /// The kind of refusal.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The message shown to the caller.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}
