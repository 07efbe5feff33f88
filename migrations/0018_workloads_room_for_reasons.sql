-- Every cycle rewrites the reasons (and shortfalls) of the waiting work whose situation changed:
-- after a burst, thousands of rows. Neither column is indexed, so PostgreSQL can update such a row
-- in place on its page (a HOT update, no index entries written) — when the page has room. Packed
-- full, none had: 0 of 19,187 updates of a 15,000-workload queue were HOT, and rewriting 9,051
-- reasons took 150–199 ms; with a fifth of each page kept free, 72–114 ms (measured on the
-- scheduling-cycle bench's database, the table rewritten once with the new setting).
--
-- Pages written from now on keep the room; pages already full gain it as their rows finish and
-- are vacuumed. The table is not rewritten here: that would lock it for the length of the rewrite.
ALTER TABLE workloads SET (fillfactor = 70);
