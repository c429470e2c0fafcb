"""The portal's mail: messages in English and Turkish, a queue in the store, one SMTP sender.

`messages` writes a message of a kind in a language; `outbox.Outbox` queues
it in the store and sends what is due (each message once, tried again with
waits that double, given up after `mail.retry_for`); `smtp.SMTPSender` hands
a message to the SMTP server (STARTTLS or TLS, and a password) with Python's
own smtplib in a worker thread: a message is a few lines, sent off the
serving path, so a library of its own would buy nothing smtplib lacks.
"""
