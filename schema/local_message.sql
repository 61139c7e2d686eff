-- "Local message table" outbox (preset "local-message").
-- Common in Chinese-speaking codebases: the business id and type, the route as two
-- columns, the body, and a numeric status. No max-retry column (the relay uses
-- tables[].max_retries) and no version column (no optimistic check).
--
-- status: 0 pending (publish me), 1 sent, 2 failed
CREATE TABLE IF NOT EXISTS local_message (
  id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  biz_id          VARCHAR(64)     NOT NULL,            -- business id (an order id), shared by its events
  biz_type        VARCHAR(64)     NOT NULL,            -- biz_id and biz_type are copied into AMQP headers
  exchange        VARCHAR(255)    NOT NULL,
  routing_key     VARCHAR(255)    NOT NULL DEFAULT '',
  message_body    LONGTEXT        NOT NULL,
  status          TINYINT         NOT NULL DEFAULT 0,  -- 0 pending / 1 sent / 2 failed
  retry_count     INT             NOT NULL DEFAULT 0,
  next_retry_time DATETIME(3)     NULL,
  created_at      DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at      DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_biz (biz_type, biz_id),
  KEY idx_status_next_retry (status, next_retry_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
