"""Admission: every refusal of a request before it runs, decided in one place.

`reasons` names each reason once; `unread` screens a request before it is decoded (the lag of
`overload`, the `backlog` of admission's last refusals); `admit` decides at submit; `drops`
takes out of the queues what can no longer make its deadline. It reads the queues and workers
(`placement`) and the estimates, and changes nothing but the queues it drops from: what runs
where next is the scheduler's.
"""
