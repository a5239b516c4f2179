-- /reports sessions ended by signing out before they expired (the SQLite migration says
-- why).
CREATE TABLE ended_sessions (
    session_id TEXT PRIMARY KEY,
    expires_at DOUBLE PRECISION NOT NULL
);
