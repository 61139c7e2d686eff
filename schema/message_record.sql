-- Message-record outbox (preset "message-record").
-- RocketMQ-style naming: topic and tag, which the relay maps to the AMQP exchange and
-- routing key. No max-retry column (tables[].max_retries applies), no next_retry_time
-- (the sweeper goes by create_time) and no version column.
--
-- status: PENDING (publish me) / SENT / FAILED
CREATE TABLE IF NOT EXISTS t_message_record (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  message_id    VARCHAR(64)     NOT NULL,
  topic         VARCHAR(255)    NOT NULL,            -- -> AMQP exchange
  tag           VARCHAR(255)    NOT NULL DEFAULT '', -- -> AMQP routing key
  message_body  LONGTEXT        NOT NULL,
  status        VARCHAR(16)     NOT NULL DEFAULT 'PENDING', -- PENDING / SENT / FAILED
  retry_count   INT             NOT NULL DEFAULT 0,
  error_message VARCHAR(1024)   NULL,
  create_time   DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  update_time   DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_message_id (message_id),
  KEY idx_status_create_time (status, create_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
