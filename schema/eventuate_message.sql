-- Eventuate Tram's message table (preset "eventuate"), as Eventuate creates it on MySQL.
-- id is a string (Eventuate's own id format), headers is a JSON object of message
-- headers (ID, DESTINATION, DATE, PARTITION_ID, ...), destination is the channel,
-- published is 0 until sent, then 1. creation_time is BIGINT milliseconds since the
-- Unix epoch, not a DATETIME.
CREATE TABLE IF NOT EXISTS message (
  id                VARCHAR(767) NOT NULL,
  destination       LONGTEXT     NOT NULL,
  headers           LONGTEXT     CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL,
  payload           LONGTEXT     CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL,
  published         SMALLINT     DEFAULT 0,
  message_partition SMALLINT     NULL,
  creation_time     BIGINT       NULL,
  PRIMARY KEY (id),
  KEY message_published_idx (published, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
