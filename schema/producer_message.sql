-- Seed-style outbox table (preset "producer-message").
-- The application inserts a row in the same transaction as its business write;
-- binlog-relay publishes it and marks it SENT.
CREATE TABLE IF NOT EXISTS producer_message (
  id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  message_id      VARCHAR(64)     NOT NULL,
  exchange        VARCHAR(255)    NOT NULL,
  routing_key     VARCHAR(255)    NOT NULL DEFAULT '',
  content         LONGTEXT        NOT NULL,
  status          VARCHAR(16)     NOT NULL DEFAULT 'PENDING', -- PENDING / SENDING / SENT / FAILED
  retry_count     INT             NOT NULL DEFAULT 0,
  max_retry_count INT             NOT NULL DEFAULT 5,
  next_retry_time DATETIME(3)     NULL,
  error_msg       VARCHAR(1024)   NULL,
  create_time     DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  update_time     DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  version         INT             NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uk_message_id (message_id),
  KEY idx_status_next_retry (status, next_retry_time),
  KEY idx_status_update_time (status, update_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
