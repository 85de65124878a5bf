-- The example shop's orders: what examples/lookup.py reads (examples/shop.db
-- is built from this file by examples/make_shop_db.py).
-- Totals are in the currency's minor units, as payment services count them;
-- payment_intent is the order's payment at the payment service. The README's
-- quickstart and "Running the examples by hand" create these payments in the
-- fake service.

CREATE TABLE orders (
    id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('paid', 'shipped', 'delivered', 'refunded')),
    total_minor INTEGER NOT NULL CHECK (total_minor > 0),
    currency TEXT NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
    payment_intent TEXT NOT NULL UNIQUE
);

INSERT INTO orders (id, customer, status, total_minor, currency, payment_intent) VALUES
    ('ord_1001', 'Ada Lovelace', 'delivered', 12000, 'USD', 'pi_shop1001'),
    ('ord_1002', 'Alan Turing', 'shipped', 3550, 'USD', 'pi_shop1002'),
    ('ord_1003', 'Grace Hopper', 'paid', 4500, 'JPY', 'pi_shop1003'),
    ('ord_1004', 'Edsger Dijkstra', 'delivered', 25000, 'USD', 'pi_shop1004');
