-- Least-privilege user for binlog-relay. Replace the password and the
-- schema name (shop) with yours.
--
-- On the replica the relay streams from (and so, replicated, everywhere):
--   REPLICATION SLAVE   to open the binlog stream
--   REPLICATION CLIENT  to read the binlog position (MariaDB 10.5+ calls it BINLOG MONITOR)
--   SELECT              on the outbox tables: start-up checks, sweeper pre-check, status
-- On the primary:
--   SELECT, UPDATE      on the outbox tables: SENT marks, sweeper claims
--   (INSERT, DELETE on the outbox and its archive table only if the archive is on)
--   optional: SESSION_VARIABLES_ADMIN (MySQL) or BINLOG ADMIN (MariaDB 10.5+), so that the
--   SENT marks log a minimal row image (relay.mark_row_image, docs/operating.md, "What the
--   SENT marks cost"); without it the marks log the rows in full and check says so:
--   GRANT SESSION_VARIABLES_ADMIN ON *.* TO 'relay'@'%';   -- MySQL
--   GRANT BINLOG ADMIN ON *.* TO 'relay'@'%';              -- MariaDB
-- For `binlog-relay reconcile` (docs/reconcile.md), on a replica of each consumer's database:
--   SELECT              on its inbox table (and t_message_log), for the user reconcile.consumers[] names
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'change-me';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT, UPDATE ON shop.* TO 'relay'@'%';
