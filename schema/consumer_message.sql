-- Consumer-side inbox table used by pkg/inbox.
-- One row per (consumer, message_id): the handler's business writes and the row's
-- SUCCESS commit in one transaction, so a redelivered message finds the row and is
-- ACKed without running the handler again. See docs/inbox.md for the state machine.
--
-- status: SUCCESS        handler committed; terminal
--         PENDING_RETRY  handler failed; the retry task republishes it at next_retry_time
--         RETRYING       republished by the retry task; next_retry_time is the deadline
--                        after which a stuck row is taken back
--         FAILED         gave up (max retries, malformed body, no message id); terminal
--
-- content is LONGBLOB, not text: the inbox must be able to record (and republish) a body
-- that is not valid UTF-8, such as a malformed message, byte for byte.
--
-- headers keeps the delivery's AMQP headers (a W3C traceparent, CloudEvents attributes...)
-- as JSON, each value with its AMQP type: {"traceparent":["string","00-..."]}. The retry
-- task republishes them with the body. A table created before this column existed:
--   ALTER TABLE consumer_message ADD COLUMN headers MEDIUMTEXT NULL AFTER content_type;
CREATE TABLE IF NOT EXISTS consumer_message (
  id                 BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  consumer           VARCHAR(128)    NOT NULL,
  message_id         VARCHAR(128)    NOT NULL,
  status             VARCHAR(16)     NOT NULL, -- SUCCESS / PENDING_RETRY / RETRYING / FAILED
  content            LONGBLOB        NOT NULL,
  content_type       VARCHAR(255)    NOT NULL DEFAULT '',
  headers            MEDIUMTEXT      NULL,
  exchange           VARCHAR(255)    NOT NULL DEFAULT '',
  routing_key        VARCHAR(255)    NOT NULL DEFAULT '',
  retry_count        INT             NOT NULL DEFAULT 0,
  max_retry_count    INT             NOT NULL DEFAULT 5,
  next_retry_time    DATETIME(3)     NULL,
  error_msg          VARCHAR(1024)   NULL,
  first_consume_time DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  last_consume_time  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  success_time       DATETIME(3)     NULL,
  version            INT             NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uk_consumer_message_id (consumer, message_id),
  KEY idx_consumer_status_next_retry (consumer, status, next_retry_time),
  KEY idx_consumer_status_success (consumer, status, success_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
