set A={count}
each GPU_{i}_ADDR={addr}:{port}
join LIST={uuid}@{endpoint}
append PATH={{x}}
