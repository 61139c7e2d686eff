-- Replication user for the replica, and the relay's least-privilege user
-- (see schema/grants.sql). Created on the primary; replicated to the replica.
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'repl';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
CREATE DATABASE IF NOT EXISTS shop;
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT, UPDATE ON shop.* TO 'relay'@'%';
USE shop;
