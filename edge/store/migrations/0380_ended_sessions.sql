-- /reports sessions ended by signing out before they expired: a sealed cookie copied before
-- the sign-out is refused as well. A row is needed only until the session would have
-- expired (expires_at), and sign-outs delete the rows past it.
CREATE TABLE ended_sessions (
    session_id TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
