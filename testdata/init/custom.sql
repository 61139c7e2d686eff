-- Outbox tables of their own, which no preset fits, for `binlog-relay init`
-- (internal/discover's tests read this file; test/integration/init_test.go
-- creates the tables and maps them on the servers). Most are the project's
-- own test tables, as its tests write them; the comment above each says whose.

-- test/integration/seed_test.go (TestNullExchangeOrMessageIDIsFailed)
CREATE TABLE events (
  id BIGINT PRIMARY KEY AUTO_INCREMENT,
  msg_id VARCHAR(64) NULL UNIQUE,
  target VARCHAR(100) NULL,
  body TEXT NOT NULL,
  state VARCHAR(20) NOT NULL DEFAULT 'NEW',
  retries INT NOT NULL DEFAULT 0,
  err VARCHAR(300) NULL,
  created DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- test/integration/reconcile_chunks_test.go (there named events): UUID keys
CREATE TABLE uuid_events (id CHAR(36) NOT NULL PRIMARY KEY, body TEXT NOT NULL, state VARCHAR(8) NOT NULL,
  created DATETIME(3) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- test/integration/dropin_test.go (TestAlterFallbackSchemaSource): an ENUM status with a value
-- that is no state
CREATE TABLE ob (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, state ENUM('PENDING','SENT','it''s') NOT NULL, body LONGTEXT, at DATETIME(3));

-- test/integration/dropin_test.go (TestPayloadsByteForByte, p_json): a JSON payload
CREATE TABLE p_json (id BIGINT UNSIGNED NOT NULL, kind VARCHAR(32) NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'PENDING',
  note VARCHAR(64) NULL, created DATETIME(3) NULL, stamp TIMESTAMP(3) NULL, payload JSON NOT NULL,
  PRIMARY KEY (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- internal/sweeper/statuses_test.go (t_num): terse names, a numeric status
CREATE TABLE t_num (id BIGINT PRIMARY KEY, body TEXT, st TINYINT, retries INT, next_retry DATETIME(3), err TEXT,
  created DATETIME(3), updated DATETIME(3), ver INT);

-- docs/presets.md ("Your own table"): the example mapping's table, its status values in the
-- column's comment
CREATE TABLE outbox_events (
  event_id BIGINT NOT NULL AUTO_INCREMENT,
  event_uuid CHAR(36) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  kind VARCHAR(64) NOT NULL,
  data JSON NOT NULL,
  state TINYINT NOT NULL DEFAULT 0 COMMENT '0 new, 1 sent, 9 dead',
  attempts INT NOT NULL DEFAULT 0,
  retry_at DATETIME(3) NULL,
  last_error VARCHAR(1024) NULL,
  created DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  traceparent VARCHAR(55) NULL,
  PRIMARY KEY (event_id),
  UNIQUE KEY uk_event_uuid (event_uuid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The seed designs' local_message with names of its own: Chinese comments for the status
-- values, topic and tag, an epoch-milliseconds creation time
CREATE TABLE mq_outbox (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  msg_key VARCHAR(64) NOT NULL COMMENT '消息键',
  topic VARCHAR(128) NOT NULL,
  tag VARCHAR(64) NULL,
  msg_content MEDIUMTEXT NOT NULL,
  msg_status TINYINT NOT NULL DEFAULT 0 COMMENT '0-待发送 1-已发送 2-发送失败',
  send_times INT NOT NULL DEFAULT 0,
  create_time BIGINT NOT NULL,
  biz_id VARCHAR(64) NULL,
  INDEX idx_status (msg_status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- No primary key, but a unique NOT NULL column the relay can mark rows by
CREATE TABLE unique_key_only (event_id VARCHAR(36) NOT NULL, body TEXT NOT NULL, UNIQUE KEY uk_event (event_id));
