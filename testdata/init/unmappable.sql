-- Tables `binlog-relay init` cannot map (exit 2, naming what is missing); internal/discover's
-- tests and test/integration/init_test.go use this file.

-- No primary key, and no unique NOT NULL column to stand for one
CREATE TABLE no_key (message_id VARCHAR(64) NULL, exchange VARCHAR(64) NOT NULL, payload TEXT NOT NULL);

-- A primary key over two columns: the relay marks rows by one
CREATE TABLE composite_key (tenant INT NOT NULL, id BIGINT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (tenant, id));

-- Nothing that can carry a message body
CREATE TABLE no_payload (id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'PENDING',
  exchange VARCHAR(64) NOT NULL, amount DECIMAL(10, 2) NOT NULL);

-- Neither
CREATE TABLE neither (a INT NULL, b DATETIME NULL);
