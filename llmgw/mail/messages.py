"""What each of the portal's messages says, in English and Turkish (the portal's two languages).

A message is plain text: a subject and a body, with the values (a link, a
summary) put in. `render(kind, lang, **values)` is the only way in.
"""

from __future__ import annotations

#: kind -> language -> (subject, body); {name} is a value given to render().
MESSAGES: dict[str, dict[str, tuple[str, str]]] = {
    "reset_link": {
        "en": ("Set a new password",
               "Someone asked to set a new password for this address on {portal}.\n\n"
               "Open this link to choose one. It works once, for an hour:\n\n{link}\n\n"
               "If it was not you, ignore this message: your password stays as it is.\n"),
        "tr": ("Yeni parola belirleyin",
               "{portal} üzerinde bu adres için yeni bir parola belirlenmesi istendi.\n\n"
               "Parolanızı seçmek için bu bağlantıyı açın. Bir kez ve bir saat boyunca çalışır:\n\n{link}\n\n"
               "Bunu siz istemediyseniz bu iletiyi yok sayın: parolanız değişmez.\n"),
    },
    "approved": {
        "en": ("Your account is ready",
               "An administrator approved your account on {portal}.\n\n"
               "Sign in here to make your API keys:\n\n{link}\n"),
        "tr": ("Hesabınız hazır",
               "Bir yönetici {portal} üzerindeki hesabınızı onayladı.\n\n"
               "API anahtarlarınızı oluşturmak için buradan giriş yapın:\n\n{link}\n"),
    },
    "budget": {
        "en": ("Budget notice: {scope}",
               "{summary}\n\nSee the spending on {link}\n"),
        "tr": ("Bütçe bildirimi: {scope}",
               "{summary}\n\nHarcamayı burada görün: {link}\n"),
    },
}

LANGUAGES = ("en", "tr")


def render(kind: str, lang: str, **values: str) -> tuple[str, str]:
    """(subject, body) of a message; an unknown language is written in English."""
    by_lang = MESSAGES[kind]
    subject, body = by_lang.get(lang) or by_lang["en"]
    return subject.format(**values), body.format(**values)
