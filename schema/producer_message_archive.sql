-- Archive for the seed outbox table (sweeper.archive.mode: move, default
-- sweeper.archive.table "{table}_archive"). The sweeper copies SENT rows older
-- than sweeper.archive.retention here, column by column, and deletes them from
-- producer_message in the same short transaction, a batch at a time.
-- It must hold every column of producer_message (extra columns are fine:
-- archived_at is filled by its default).
CREATE TABLE IF NOT EXISTS producer_message_archive (
  id              BIGINT UNSIGNED NOT NULL,
  message_id      VARCHAR(64)     NOT NULL,
  exchange        VARCHAR(255)    NOT NULL,
  routing_key     VARCHAR(255)    NOT NULL DEFAULT '',
  content         LONGTEXT        NOT NULL,
  status          VARCHAR(16)     NOT NULL,
  retry_count     INT             NOT NULL DEFAULT 0,
  max_retry_count INT             NOT NULL DEFAULT 5,
  next_retry_time DATETIME(3)     NULL,
  error_msg       VARCHAR(1024)   NULL,
  create_time     DATETIME(3)     NOT NULL,
  update_time     DATETIME(3)     NOT NULL,
  version         INT             NOT NULL DEFAULT 0,
  archived_at     DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_message_id (message_id),
  KEY idx_create_time (create_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
