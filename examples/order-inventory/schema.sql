-- Business tables of the order-inventory example. Apply after
-- schema/producer_message.sql (the order service's outbox) and
-- schema/consumer_message.sql (the inventory service's inbox).

-- Written by the order service, in the same transaction as its producer_message row.
CREATE TABLE IF NOT EXISTS orders (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  order_no    VARCHAR(64)     NOT NULL,
  sku         VARCHAR(64)     NOT NULL,
  quantity    INT             NOT NULL,
  create_time DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_order_no (order_no),
  KEY idx_sku (sku)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Owned by the inventory service; initial_quantity makes the books checkable.
CREATE TABLE IF NOT EXISTS stock (
  sku              VARCHAR(64) NOT NULL,
  quantity         INT         NOT NULL,
  initial_quantity INT         NOT NULL,
  PRIMARY KEY (sku)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per deduction. order_no is deliberately not unique: exactly-once must come
-- from the inbox, and a double deduction must show up here as two rows.
CREATE TABLE IF NOT EXISTS stock_movement (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  order_no    VARCHAR(64)     NOT NULL,
  sku         VARCHAR(64)     NOT NULL,
  quantity    INT             NOT NULL,
  message_id  VARCHAR(128)    NOT NULL,
  create_time DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_order_no (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
