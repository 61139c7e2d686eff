-- The inventory of the Compose demo: 20 SKUs with 1,000 each. Runs after the tables
-- (examples/order-inventory/schema.sql).
INSERT IGNORE INTO stock (sku, quantity, initial_quantity) VALUES
  ('sku-000', 1000, 1000),
  ('sku-001', 1000, 1000),
  ('sku-002', 1000, 1000),
  ('sku-003', 1000, 1000),
  ('sku-004', 1000, 1000),
  ('sku-005', 1000, 1000),
  ('sku-006', 1000, 1000),
  ('sku-007', 1000, 1000),
  ('sku-008', 1000, 1000),
  ('sku-009', 1000, 1000),
  ('sku-010', 1000, 1000),
  ('sku-011', 1000, 1000),
  ('sku-012', 1000, 1000),
  ('sku-013', 1000, 1000),
  ('sku-014', 1000, 1000),
  ('sku-015', 1000, 1000),
  ('sku-016', 1000, 1000),
  ('sku-017', 1000, 1000),
  ('sku-018', 1000, 1000),
  ('sku-019', 1000, 1000);
