-- Debezium-style outbox (preset "debezium"), as the Debezium outbox event router
-- expects it: a UUID id, the aggregate type the event is routed by, the aggregate id,
-- the event type and a JSON payload.
--
-- There is no status column: every inserted row is published once and nothing is
-- written back (applications usually delete outbox rows right after inserting them,
-- or purge them on a schedule). On MariaDB JSON is LONGTEXT with a JSON_VALID check,
-- so the payload is published byte for byte.
CREATE TABLE IF NOT EXISTS outbox (
  id            CHAR(36)     NOT NULL,           -- UUID, also the AMQP message-id
  aggregatetype VARCHAR(255) NOT NULL,           -- -> AMQP exchange (or route.exchange_map)
  aggregateid   VARCHAR(255) NOT NULL,           -- -> AMQP header aggregateid
  type          VARCHAR(255) NOT NULL,           -- -> AMQP routing key
  payload       JSON         NULL,
  -- Optional: the trace context of the transaction that wrote the row, as Debezium's
  -- outbox extension writes it (java.util.Properties text: traceparent=...). With
  -- trace: {format: debezium} it becomes the traceparent and tracestate headers.
  tracingspancontext VARCHAR(512) NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
