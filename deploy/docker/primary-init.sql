-- Users of the Compose demo, created on the primary and replicated to the replica:
--   repl    the replica's replication user
--   relay   binlog-relay's least-privilege user (see schema/grants.sql)
--   shop    the order and inventory services
-- Passwords equal the names: this is a demo. Runs first, against MYSQL_DATABASE (shop).
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'repl';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT, UPDATE ON shop.* TO 'relay'@'%';
CREATE USER IF NOT EXISTS 'shop'@'%' IDENTIFIED BY 'shop';
GRANT SELECT, INSERT, UPDATE, DELETE ON shop.* TO 'shop'@'%';
