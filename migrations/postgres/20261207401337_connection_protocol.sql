-- How each listed connection reached its node (issue 37): `ws`, `mqtt` or `mqtt-ws`.
ALTER TABLE registry_connections ADD COLUMN protocol TEXT NOT NULL DEFAULT 'ws';
