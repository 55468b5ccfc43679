#!/usr/bin/env python3
"""Synthetic Harmony dialogues for osprey-mini, the small gpt-oss that osprey ships and tests on.

Writes JSON Lines, one example a line: {"family", "split", "date", "request"}, where "request" is an
OpenAI chat-completions body whose last message is the assistant's reply to learn (its
`reasoning_content`, then `content` or `tool_calls`). `osprey render --requests F --reply` turns each
into the exact tokens `osprey serve` renders for the request without the reply, followed by the reply
as the model writes it, so training and serving see the same tokens.

Families (each holds something out for the test split):
  facts       capital, continent, currency, languages and calling code of every country in the
              countries-list npm package (MIT); test: phrasings never used in training
  arithmetic  +, -, * on numbers of up to 3 digits, column steps in the reasoning; test: operand
              pairs never used in training
  units       integer-factor unit conversions through the same steps; test: unseen values
  tools       generated functions (names, descriptions, JSON schemas of every shape, 1-4 declared at
              once): call the one that fits with arguments from the request, answer from its result,
              call nothing when none fits; test: function names, parameter names and argument values
              never used in training
  refusal     questions it cannot answer (made-up countries, live data without a tool, the user's
              private facts): a polite refusal; test: unseen made-up names
  multiturn   follow-up questions that lean on the earlier turns; test: held-out phrasings
  chat        greetings and questions about itself

Usage: data.py --countries DIR --out-train F --out-test F [--train N] [--test-per-family N] [--seed S]
Deterministic for a given seed.
"""
import argparse
import datetime
import json
import os
import random

# ----------------------------------------------------------------------------- countries


def load_countries(d):
    countries = json.load(open(os.path.join(d, "countries.min.json")))
    continents = json.load(open(os.path.join(d, "continents.min.json")))
    currencies = json.load(open(os.path.join(d, "currencies.min.json")))
    languages = json.load(open(os.path.join(d, "languages.min.json")))
    out = []
    for code, c in sorted(countries.items()):
        if not c.get("capital") or c.get("partOf"):
            continue
        langs = [languages[l]["name"] for l in c.get("languages", []) if l in languages]
        curr = [currencies[x]["name"] for x in c.get("currency", []) if x in currencies]
        out.append({"name": c["name"], "capital": c["capital"], "continent": continents[c["continent"]],
                    "currency": curr[0] if curr else None, "languages": langs[:3],
                    "phone": c["phone"][0] if c.get("phone") else None})
    return out


def join_and(xs):
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


# Question phrasings per attribute: the last two of each list are held out for the test split.
FACT_Q = {
    "capital": ["What is the capital of {c}?", "Capital of {c}?", "Which city is the capital of {c}?",
                "Tell me the capital of {c}.", "what's the capital of {c}", "Name the capital city of {c}.",
                "Do you know the capital of {c}?", "I need the capital of {c}.",
                "What city serves as the capital of {c}?", "{c}: what is its capital?"],
    "continent": ["Which continent is {c} in?", "On what continent is {c}?", "What continent is {c} part of?",
                  "{c} is on which continent?", "Where is {c}, which continent?", "continent of {c}?",
                  "In which continent would I find {c}?", "Tell me which continent {c} belongs to."],
    "currency": ["What currency does {c} use?", "What is the currency of {c}?", "Which money is used in {c}?",
                 "currency of {c}?", "What do people in {c} pay with?", "Tell me the official currency of {c}.",
                 "Which currency is official in {c}?", "What is {c}'s currency called?"],
    "languages": ["What language is spoken in {c}?", "What are the official languages of {c}?",
                  "Which languages do they speak in {c}?", "languages of {c}?", "What do people speak in {c}?",
                  "Tell me the main language of {c}.", "Which language would I hear in {c}?",
                  "What is the official language in {c}?"],
    "phone": ["What is the calling code of {c}?", "What is the international dialing code for {c}?",
              "phone code of {c}?", "Which country code do I dial for {c}?", "What is the telephone prefix of {c}?",
              "Tell me the calling code for {c}.", "How do I dial {c}, which code?", "What's {c}'s dialing code?"],
}
HELD = 2


def fact_answer(attr, c):
    n = c["name"]
    if attr == "capital":
        return f"The user asks for the capital of {n}. The capital of {n} is {c['capital']}.", \
               f"The capital of {n} is {c['capital']}."
    if attr == "continent":
        return f"The user asks which continent {n} is in. {n} is in {c['continent']}.", \
               f"{n} is in {c['continent']}."
    if attr == "currency":
        return f"The user asks for the currency of {n}. {n} uses the {c['currency']}.", \
               f"The currency of {n} is the {c['currency']}."
    if attr == "languages":
        ls = join_and(c["languages"])
        return f"The user asks about the languages of {n}. The official languages of {n} include {ls}.", \
               f"The official languages of {n} include {ls}."
    return f"The user asks for the calling code of {n}. The calling code of {n} is +{c['phone']}.", \
           f"The calling code of {n} is +{c['phone']}."


def fact_attrs(c):
    return [a for a in FACT_Q if (a != "currency" or c["currency"]) and (a != "languages" or c["languages"])
            and (a != "phone" or c["phone"])]


# ----------------------------------------------------------------------------- arithmetic steps


def digits(n):
    return " ".join(str(n))


def add_steps(nums):
    """Column addition of non-negative ints; returns (lines, sum)."""
    width = max(len(str(n)) for n in nums)
    lines, carry, out = [], 0, []
    for i in range(width):
        ds = [int(str(n)[::-1][i]) for n in nums if i < len(str(n))]
        s = sum(ds) + carry
        expr = " + ".join(map(str, ds)) + (f" + {carry}" if carry else "")
        carry, d = divmod(s, 10)
        if i == width - 1 and carry:
            lines.append(f"{expr} = {s}, write {s}.")
            out.append(str(s)[::-1])
            carry = 0
        else:
            lines.append(f"{expr} = {s}, write {d}" + (f" carry {carry}." if carry else "."))
            out.append(str(d))
    total = sum(nums)
    assert int("".join(out)[::-1]) == total
    return lines, total


def sub_steps(a, b):
    """Column subtraction a - b with a >= b >= 0."""
    sa, sb = str(a)[::-1], str(b)[::-1]
    lines, borrow, out = [], 0, []
    for i in range(len(sa)):
        x = int(sa[i]) - borrow
        y = int(sb[i]) if i < len(sb) else 0
        top = f"{sa[i]} - {borrow}" if borrow else sa[i]
        if x < y:
            lines.append(f"{top} - {y}: borrow, {x + 10} - {y} = {x + 10 - y}, write {x + 10 - y}.")
            out.append(str(x + 10 - y)); borrow = 1
        else:
            lines.append(f"{top} - {y} = {x - y}, write {x - y}.")
            out.append(str(x - y)); borrow = 0
    r = int("".join(out)[::-1])
    assert r == a - b
    return lines, r


def mul1_steps(a, d):
    """a * d for one digit d."""
    lines, carry, out = [], 0, []
    s = str(a)[::-1]
    for i, ch in enumerate(s):
        p = int(ch) * d + carry
        expr = f"{ch} * {d}" + (f" + {carry}" if carry else "")
        if i == len(s) - 1:
            lines.append(f"{expr} = {p}, write {p}.")
            out.append(str(p)[::-1])
        else:
            carry, w = divmod(p, 10)
            lines.append(f"{expr} = {p}, write {w}" + (f" carry {carry}." if carry else "."))
            out.append(str(w))
    r = int("".join(out)[::-1])
    assert r == a * d
    return lines, r


def mul_steps(a, b):
    """a * b: one partial product per nonzero digit of b, then their column sum."""
    if b == 0 or a == 0:
        return [f"Anything times 0 is 0."], 0
    lines, parts = [], []
    for place, ch in enumerate(str(b)[::-1]):
        d = int(ch)
        if d == 0:
            continue
        if d == 1:
            part = a
            lines.append(f"{a} * 1 = {a}.")
        else:
            ls, part = mul1_steps(a, d)
            lines.append(f"{a} * {d}:")
            lines += ls
        if place:
            lines.append(f"Shift by {place} place{'s' if place > 1 else ''}: {part * 10 ** place}.")
        parts.append(part * 10 ** place)
    if len(parts) > 1:
        lines.append("Add the partial products " + " + ".join(map(str, parts)) + ":")
        ls, _ = add_steps(parts)
        lines += ls
    assert sum(parts) == a * b
    return lines, a * b


def arith_reasoning(a, op, b):
    if op == "+":
        ls, r = add_steps([a, b])
        head = f"Add {a} and {b} digit by digit from the right."
    elif op == "-":
        if a >= b:
            ls, r = sub_steps(a, b)
            head = f"Subtract {b} from {a} digit by digit from the right."
        else:
            ls, r = sub_steps(b, a)
            head = f"{a} is less than {b}, so compute {b} - {a} and negate it."
            r = -r
    else:
        ls, r = mul_steps(a, b)
        head = f"Multiply {a} by each digit of {b}."
    tail = f"So {a} {op} {b} = {r}."
    return "\n".join([head] + ls + [tail]), r


ARITH_Q = ["What is {a} {w} {b}?", "Compute {a} {s} {b}.", "{a} {s} {b} = ?", "What's {a} {w} {b}?",
           "Calculate {a} {s} {b}", "How much is {a} {w} {b}?", "Please work out {a} {s} {b}.", "{a} {w} {b}?"]
OP_WORD = {"+": "plus", "-": "minus", "*": "times"}


def rand_operand(rng):
    n = rng.choice([1, 2, 2, 3, 3, 3])
    return rng.randint(0 if n == 1 else 10 ** (n - 1), 10 ** n - 1)


def arith_is_test(a, op, b):
    return (a * 7919 + b * 104729 + "+-*".index(op) * 31) % 10 == 0


# ----------------------------------------------------------------------------- units

UNITS = [("kilometers", "meters", 1000), ("meters", "centimeters", 100), ("kilograms", "grams", 1000),
         ("hours", "minutes", 60), ("minutes", "seconds", 60), ("days", "hours", 24), ("weeks", "days", 7),
         ("feet", "inches", 12), ("yards", "feet", 3), ("liters", "milliliters", 1000), ("years", "months", 12),
         ("meters", "millimeters", 1000)]
UNIT_Q = ["How many {to} are in {v} {fr}?", "Convert {v} {fr} to {to}.", "{v} {fr} in {to}?",
          "What is {v} {fr} in {to}?", "How many {to} is {v} {fr}?", "Please convert {v} {fr} into {to}."]


def unit_reasoning(v, fr, to, f):
    head = f"1 {fr[:-1] if fr.endswith('s') else fr} is {f} {to}, so {v} {fr} is {v} * {f} {to}."
    if f in (10, 100, 1000):
        z = len(str(f)) - 1
        body = [f"Multiplying by {f} appends {z} zero{'s' if z > 1 else ''}: {v * f}."]
    else:
        body, _ = mul_steps(v, f)
    return "\n".join([head] + body + [f"So {v} {fr} is {v * f} {to}."]), v * f


# ----------------------------------------------------------------------------- tools

CITIES = ["Oslo", "Paris", "Tokyo", "Lima", "Cairo", "Nairobi", "Berlin", "Madrid", "Rome", "Toronto", "Sydney",
          "Mumbai", "Seoul", "Lagos", "Dublin", "Vienna", "Prague", "Lisbon", "Athens", "Warsaw", "Helsinki",
          "Chicago", "Boston", "Denver", "Austin", "Seattle", "Miami", "Havana", "Santiago", "Bogota", "Quito",
          "Montreal", "Vancouver", "Osaka", "Kyoto", "Hanoi", "Bangkok", "Manila", "Jakarta", "Istanbul",
          "Zurich", "Geneva", "Munich", "Hamburg", "Milan", "Naples", "Porto", "Seville", "Krakow", "Budapest",
          "Copenhagen", "Stockholm", "Reykjavik", "Edinburgh", "Glasgow", "Marseille", "Lyon", "Nice", "Antwerp",
          "Rotterdam", "Casablanca", "Tunis", "Accra", "Dakar", "Kampala", "Lusaka", "Harare", "Perth", "Auckland",
          "Wellington", "Calgary", "Ottawa", "Phoenix", "Dallas", "Houston", "Atlanta", "Portland", "Detroit"]
TEST_CITIES = set(CITIES[::7])
PEOPLE = ["Alice", "Bob", "Carla", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemal", "Lena",
          "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yara", "Zane"]
TEST_PEOPLE = set(PEOPLE[::6])
TOPICS = ["science", "sports", "politics", "music", "technology", "travel", "health", "business", "movies",
          "climate", "space", "food", "history", "art", "education"]
SONGS = ["Blue Sky", "River Song", "Night Drive", "Golden Hour", "Paper Moon", "Summer Rain", "City Lights",
         "Wild Heart", "Silver Line", "Ocean Eyes", "Northern Star", "Slow Dance"]
WORDS = ["serendipity", "ephemeral", "gregarious", "lucid", "meander", "quixotic", "resilient", "taciturn",
         "ubiquitous", "verbose", "whimsical", "zealous", "candid", "diligent", "eloquent", "frugal"]
SYMBOLS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "META", "IBM", "ORCL", "INTC", "SAP", "SONY"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "NOK", "SEK", "CAD", "AUD", "INR"]
LANGS = ["French", "Spanish", "German", "Italian", "Japanese", "Portuguese", "Dutch", "Swedish"]
PHRASES = ["good morning", "thank you very much", "where is the station", "see you tomorrow", "I love music",
           "how much does it cost", "the weather is nice"]
TRANSLATIONS = {  # a tool result, not knowledge the model needs
    "French": "[French]", "Spanish": "[Spanish]", "German": "[German]", "Italian": "[Italian]",
    "Japanese": "[Japanese]", "Portuguese": "[Portuguese]", "Dutch": "[Dutch]", "Swedish": "[Swedish]"}


def S(desc=None, **kw):
    d = {"type": "string"}
    if desc: d["description"] = desc
    d.update(kw)
    return d


def N(desc=None, t="number"):
    d = {"type": t}
    if desc: d["description"] = desc
    return d


# Each intent: function-name variants (the last is held out), description variants (the last held
# out), parameter-name variants per argument (the last held out), the schema builder, the requests,
# the result and the answer. An argument value drawn for the test split comes from held-out pools.
def intents():
    I = []

    def intent(key, names, descs, params, build, asks, result, answer, reason):
        I.append(dict(key=key, names=names, descs=descs, params=params, build=build, asks=asks, result=result,
                      answer=answer, reason=reason))

    intent("weather", ["get_weather", "get_current_weather", "weather_lookup", "fetch_weather", "check_weather"],
           ["Get the current weather for a location.", "Returns current weather conditions in a city.",
            "Look up today's weather for a city.", "Current weather report for a place."],
           {"loc": ["location", "city", "place", "town"]},
           lambda p: {"type": "object", "properties": {p["loc"]: S("The city, e.g. Oslo")}, "required": [p["loc"]]},
           ["What is the weather in {city}?", "How's the weather in {city} today?", "Is it raining in {city}?",
            "weather in {city}?", "Tell me the current weather in {city}.", "What's it like outside in {city} right now?"],
           lambda v, r: {"temperature": r.randint(-15, 38), "condition": r.choice(CONDITIONS)},
           lambda v, res: f"It is {res['temperature']}°C and {res['condition']} in {v['city']}.",
           "The user wants the current weather in {city}.")
    intent("time", ["get_time", "get_local_time", "current_time", "time_in_city", "lookup_clock"],
           ["Get the current local time in a city.", "Returns the local time for a given city.",
            "Tells what time it is in a place.", "Current time at a location."],
           {"loc": ["city", "location", "place", "where"]},
           lambda p: {"type": "object", "properties": {p["loc"]: S("City name")}, "required": [p["loc"]]},
           ["What time is it in {city}?", "Current time in {city}?", "What's the local time in {city}?",
            "time in {city} now?", "Tell me the time in {city}.", "Do you know what time it is in {city}?"],
           lambda v, r: {"time": f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}"},
           lambda v, res: f"It is {res['time']} in {v['city']} right now.",
           "The user wants the local time in {city}.")
    intent("calc", ["calculator", "evaluate_expression", "calculate", "math_eval", "compute"],
           ["Evaluate an arithmetic expression.", "A calculator: returns the value of a math expression.",
            "Computes the result of an expression such as 2 * (3 + 4).", "Evaluates math."],
           {"expr": ["expression", "expr", "input", "formula"]},
           lambda p: {"type": "object", "properties": {p["expr"]: S("The expression")}, "required": [p["expr"]]},
           ["Use the calculator to compute {x} * {y}.", "Calculate {x} * {y} with the tool.",
            "Please evaluate {x} * {y} using the calculator.", "Run {x} * {y} through the calculator.",
            "Can you use your calculator for {x} * {y}?", "Tool time: {x} * {y}."],
           lambda v, r: {"result": v["x"] * v["y"]},
           lambda v, res: f"{v['x']} * {v['y']} = {res['result']}.",
           "The user wants {x} * {y} computed with the calculator.")
    intent("fx", ["convert_currency", "currency_convert", "exchange_money", "fx_convert", "money_exchange"],
           ["Convert an amount between currencies.", "Converts money from one currency to another.",
            "Currency conversion at today's rate.", "Exchange an amount of money into another currency."],
           {"amt": ["amount", "value", "sum", "quantity"], "src": ["from_currency", "source", "from", "base"],
            "dst": ["to_currency", "target", "to", "quote"]},
           lambda p: {"type": "object", "properties": {p["amt"]: N("Amount"), p["src"]: S("ISO code"),
                                                       p["dst"]: S("ISO code")}, "required": [p["amt"], p["src"], p["dst"]]},
           ["Convert {n} {c1} to {c2}.", "How much is {n} {c1} in {c2}?", "What are {n} {c1} worth in {c2}?",
            "{n} {c1} to {c2}, please.", "Exchange {n} {c1} into {c2}.", "I have {n} {c1}; how many {c2} is that?"],
           lambda v, r: {"converted": round(v["n"] * r.uniform(0.2, 3.0), 2)},
           lambda v, res: f"{v['n']} {v['c1']} is about {res['converted']} {v['c2']}.",
           "The user wants to convert {n} {c1} to {c2}.")
    intent("email", ["send_email", "email_send", "compose_email", "mail_message", "dispatch_mail"],
           ["Send an email.", "Sends an email message to a recipient.", "Compose and send an email.",
            "Deliver an email to someone."],
           {"to": ["to", "recipient", "address", "send_to"], "subj": ["subject", "title", "topic", "headline"]},
           lambda p: {"type": "object", "properties": {p["to"]: S("Recipient name"), p["subj"]: S("Subject line")},
                      "required": [p["to"], p["subj"]]},
           ["Email {person} about {topic}.", "Send {person} an email with the subject {topic}.",
            "Please write to {person} about {topic}.", "Shoot {person} an email on {topic}.",
            "Can you email {person} regarding {topic}?", "Mail {person}: subject {topic}."],
           lambda v, r: {"status": "sent"},
           lambda v, res: f"Done: the email to {v['person']} about {v['topic']} was sent.",
           "The user wants to email {person} about {topic}.")
    intent("stock", ["get_stock_price", "stock_quote", "lookup_ticker", "share_price", "market_price"],
           ["Get the latest stock price for a ticker symbol.", "Returns the current share price.",
            "Look up a stock quote.", "Latest trading price of a stock."],
           {"sym": ["symbol", "ticker", "stock", "code"]},
           lambda p: {"type": "object", "properties": {p["sym"]: S("Ticker, e.g. AAPL")}, "required": [p["sym"]]},
           ["What is the stock price of {sym}?", "How much is {sym} trading at?", "Quote for {sym}?",
            "Get me the share price of {sym}.", "Where is {sym} trading now?", "Price of {sym} stock?"],
           lambda v, r: {"price": round(r.uniform(5, 900), 2)},
           lambda v, res: f"{v['sym']} is trading at {res['price']} dollars.",
           "The user wants the current price of {sym}.")
    intent("translate", ["translate_text", "translate", "translator", "localize_text", "convert_language"],
           ["Translate text into another language.", "Translates a phrase to the target language.",
            "Machine translation of short text.", "Render text in a different language."],
           {"text": ["text", "phrase", "content", "source_text"], "lang": ["target_language", "language", "to", "lang"]},
           lambda p: {"type": "object", "properties": {p["text"]: S("Text to translate"),
                                                       p["lang"]: S("Target language", enum=LANGS)},
                      "required": [p["text"], p["lang"]]},
           ["Translate \"{phrase}\" into {lang}.", "How do you say \"{phrase}\" in {lang}?",
            "Please translate \"{phrase}\" to {lang}.", "\"{phrase}\" in {lang}?",
            "Can you put \"{phrase}\" into {lang}?", "Give me \"{phrase}\" in {lang}."],
           lambda v, r: {"translation": f"{TRANSLATIONS[v['lang']]} {v['phrase']}"},
           lambda v, res: f"In {v['lang']}: {res['translation']}.",
           "The user wants \"{phrase}\" translated into {lang}.")
    intent("news", ["get_news", "fetch_headlines", "news_search", "latest_news", "headline_feed"],
           ["Get the latest news headlines on a topic.", "Returns recent headlines.", "Search news articles.",
            "Top stories for a subject."],
           {"topic": ["topic", "query", "subject", "category"], "count": ["limit", "count", "max_results", "n"]},
           lambda p: {"type": "object", "properties": {p["topic"]: S("Topic"), p["count"]: N("How many", "integer")},
                      "required": [p["topic"]]},
           ["Give me {k} headlines about {topic}.", "What are the top {k} news stories on {topic}?",
            "Show {k} recent news items about {topic}.", "I want {k} {topic} headlines.",
            "Find {k} news articles on {topic}.", "Latest {k} stories about {topic}?"],
           lambda v, r: {"headlines": [f"{v['topic'].title()} story {i + 1}" for i in range(v["k"])]},
           lambda v, res: "Here are the headlines: " + "; ".join(res["headlines"]) + ".",
           "The user wants {k} headlines about {topic}.")
    intent("music", ["play_music", "play_song", "start_playback", "music_play", "queue_track"],
           ["Play a song.", "Starts playing a track by an artist.", "Plays music.", "Queue and play a song."],
           {"song": ["song", "title", "track", "name"], "artist": ["artist", "by", "performer", "singer"]},
           lambda p: {"type": "object", "properties": {p["song"]: S("Song title"), p["artist"]: S("Artist")},
                      "required": [p["song"]]},
           ["Play {song} by {person}.", "Put on {song} by {person}.", "I want to hear {song} by {person}.",
            "Start {song} from {person}.", "Could you play {song}, the one by {person}?", "Queue {song} by {person}."],
           lambda v, r: {"playing": True},
           lambda v, res: f"Now playing {v['song']} by {v['person']}.",
           "The user wants to hear {song} by {person}.")
    intent("dict", ["define_word", "dictionary_lookup", "word_meaning", "lookup_definition", "get_definition"],
           ["Look up the definition of a word.", "Returns a dictionary definition.", "Defines an English word.",
            "Dictionary entry for a word."],
           {"word": ["word", "term", "query", "entry"]},
           lambda p: {"type": "object", "properties": {p["word"]: S("The word")}, "required": [p["word"]]},
           ["Define {word}.", "What does {word} mean?", "Look up {word} in the dictionary.", "meaning of {word}?",
            "Give me the definition of {word}.", "What is the meaning of the word {word}?"],
           lambda v, r: {"definition": f"the dictionary sense of {v['word']}"},
           lambda v, res: f"{v['word'].capitalize()} means {res['definition']}.",
           "The user wants the definition of {word}.")
    intent("meeting", ["schedule_meeting", "create_event", "book_meeting", "calendar_add", "plan_meeting"],
           ["Schedule a meeting with people.", "Creates a calendar event with attendees.",
            "Book a meeting in the calendar.", "Adds a meeting for a list of participants."],
           {"people": ["attendees", "participants", "people", "invitees"],
            "mins": ["duration_minutes", "minutes", "length", "duration"]},
           lambda p: {"type": "object", "properties": {p["people"]: {"type": "array", "items": S()},
                                                       p["mins"]: N("Length in minutes", "integer")},
                      "required": [p["people"], p["mins"]]},
           ["Set up a {mins}-minute meeting with {person} and {person2}.",
            "Schedule {mins} minutes with {person} and {person2}.", "Book a meeting of {mins} minutes for {person} and {person2}.",
            "I need a {mins} minute call with {person} and {person2}.", "Plan a {mins}-minute sync with {person} and {person2}.",
            "Put {mins} minutes on the calendar with {person} and {person2}."],
           lambda v, r: {"event_id": f"ev{r.randint(100, 999)}"},
           lambda v, res: f"The {v['mins']}-minute meeting with {v['person']} and {v['person2']} is booked ({res['event_id']}).",
           "The user wants a {mins}-minute meeting with {person} and {person2}.")
    intent("contact", ["create_contact", "add_contact", "save_contact", "new_contact", "store_contact"],
           ["Add a person to the address book.", "Creates a contact with a name and phone number.",
            "Saves a new contact.", "Store someone's details in the contacts."],
           {"person": ["person", "contact", "who", "details"], "phone": ["phone", "number", "tel", "mobile"]},
           lambda p: {"type": "object", "properties": {p["person"]: {"type": "object", "properties": {
               "first_name": S(), "last_name": S()}, "required": ["first_name"]}, p["phone"]: S("Phone number")},
                      "required": [p["person"], p["phone"]]},
           ["Save {person} {last} with the number {tel}.", "Add {person} {last}, phone {tel}, to my contacts.",
            "Create a contact for {person} {last} at {tel}.", "New contact: {person} {last}, {tel}.",
            "Store {person} {last}'s number {tel}.", "Please add {person} {last} ({tel}) to the address book."],
           lambda v, r: {"saved": True},
           lambda v, res: f"{v['person']} {v['last']} is saved with the number {v['tel']}.",
           "The user wants to save {person} {last} with number {tel}.")
    intent("lights", ["set_lights", "control_lights", "smart_light", "adjust_lighting", "light_switch"],
           ["Turn the lights in a room on or off.", "Controls the smart lights of a room.", "Switch lights.",
            "Set a room's lights."],
           {"room": ["room", "area", "zone", "location"], "state": ["state", "power", "mode", "switch"]},
           lambda p: {"type": "object", "properties": {p["room"]: S("Room"), p["state"]: S(enum=["on", "off"])},
                      "required": [p["room"], p["state"]]},
           ["Turn {state} the lights in the {room}.", "Switch the {room} lights {state}.", "Lights {state} in the {room}, please.",
            "Can you turn the {room} lights {state}?", "Please switch {state} the {room} lights.", "{room} lights {state}."],
           lambda v, r: {"ok": True},
           lambda v, res: f"The lights in the {v['room']} are now {v['state']}.",
           "The user wants the {room} lights turned {state}.")
    intent("random", ["random_number", "get_random_number", "roll_random", "rng", "pick_number"],
           ["Returns a random number.", "Generates a random integer.", "Random number generator.",
            "Draws a random number."],
           {},
           lambda p: {"type": "object", "properties": {}},
           ["Give me a random number.", "Pick a random number for me.", "I need a random number.",
            "Generate a random number, please.", "Random number?", "Can you draw a random number?"],
           lambda v, r: {"number": r.randint(1, 1000)},
           lambda v, res: f"Your random number is {res['number']}.",
           "The user wants a random number.")
    intent("joke", ["tell_joke", "get_joke", "random_joke", "joke_of_the_day", "fetch_joke"],
           ["Returns a joke.", "Fetches a random joke.", "Gets a funny joke.", "A joke service."],
           {},
           lambda p: None,
           ["Tell me a joke.", "I want to hear a joke.", "Got a joke for me?", "Make me laugh with a joke.",
            "Can you fetch a joke?", "Joke, please."],
           lambda v, r: {"joke": r.choice(["Why did the bicycle fall over? It was two tired.",
                                           "I told my computer a joke about UDP. It did not get it.",
                                           "Parallel lines have so much in common. It is a shame they will never meet."])},
           lambda v, res: res["joke"],
           "The user wants a joke.")
    return I


ROOMS = ["kitchen", "bedroom", "living room", "office", "garage", "hallway", "bathroom", "garden"]
TEST_ROOMS = {"garage", "garden"}
LASTS = ["Smith", "Berg", "Ito", "Silva", "Novak", "Khan", "Rossi", "Moreau", "Kowalski", "Larsen"]


def tool_values(key, rng, test):
    def pick(pool, held):
        c = [x for x in pool if (x in held) == test]
        return rng.choice(c)
    people = pick(PEOPLE, TEST_PEOPLE)
    v = {"city": pick(CITIES, TEST_CITIES), "person": people,
         "person2": rng.choice([p for p in PEOPLE if p != people]), "topic": rng.choice(TOPICS),
         "x": rng.randint(2, 99), "y": rng.randint(2, 99), "n": rng.choice([5, 10, 20, 50, 100, 250, 1000]),
         "c1": rng.choice(CURRENCIES), "sym": rng.choice(SYMBOLS), "phrase": rng.choice(PHRASES),
         "lang": rng.choice(LANGS), "k": rng.randint(2, 4), "song": rng.choice(SONGS), "word": rng.choice(WORDS),
         "mins": rng.choice([15, 30, 45, 60, 90]), "last": rng.choice(LASTS),
         "tel": f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
         "room": pick(ROOMS, TEST_ROOMS), "state": rng.choice(["on", "off"])}
    v["c2"] = rng.choice([c for c in CURRENCIES if c != v["c1"]])
    return v


def tool_args(key, p, v):
    return {
        "weather": lambda: {p.get("loc"): v["city"]}, "time": lambda: {p.get("loc"): v["city"]},
        "calc": lambda: {p.get("expr"): f"{v['x']} * {v['y']}"},
        "fx": lambda: {p["amt"]: v["n"], p["src"]: v["c1"], p["dst"]: v["c2"]},
        "email": lambda: {p["to"]: v["person"], p["subj"]: v["topic"]}, "stock": lambda: {p["sym"]: v["sym"]},
        "translate": lambda: {p["text"]: v["phrase"], p["lang"]: v["lang"]},
        "news": lambda: {p["topic"]: v["topic"], p["count"]: v["k"]},
        "music": lambda: {p["song"]: v["song"], p["artist"]: v["person"]}, "dict": lambda: {p["word"]: v["word"]},
        "meeting": lambda: {p["people"]: [v["person"], v["person2"]], p["mins"]: v["mins"]},
        "contact": lambda: {p["person"]: {"first_name": v["person"], "last_name": v["last"]}, p["phone"]: v["tel"]},
        "lights": lambda: {p["room"]: v["room"], p["state"]: v["state"]},
        "random": lambda: {}, "joke": lambda: {},
    }[key]()


def pick_variant(rng, xs, test):
    """Training draws from all but the last variant; the test split always takes the last."""
    return xs[-1] if test else rng.choice(xs[:-1])


def declare(rng, it, test):
    name = pick_variant(rng, it["names"], test)
    desc = pick_variant(rng, it["descs"], test)
    p = {k: pick_variant(rng, names, test) for k, names in it["params"].items()}
    fn = {"name": name, "description": desc}
    params = it["build"](p)
    if params is not None:
        fn["parameters"] = params
    return {"type": "function", "function": fn}, p


def call_id(rng):
    return "call_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))


# ----------------------------------------------------------------------------- examples

SYSTEM_PROMPTS = ["You are a helpful assistant.", "Answer concisely.", "You are a friendly assistant. Be brief.",
                  "Be precise and polite.", "You are osprey-mini, a small helpful model."]
FAKE_SYL = ["zor", "vel", "qua", "mib", "tran", "lok", "ser", "dun", "pra", "wex", "olo", "kar", "nim", "bex",
            "ruv", "tal", "fen", "gro", "ish", "yut"]


def fake_country(rng, test):
    while True:
        n = "".join(rng.choice(FAKE_SYL) for _ in range(rng.randint(2, 3))).capitalize() + rng.choice(["ia", "land", "stan", "ania", "or"])
        if (sum(map(ord, n)) % 5 == 0) == test:
            return n


class Gen:
    def __init__(self, countries, seed):
        self.countries = countries
        self.intents = intents()
        self.seed = seed

    def base(self, rng, messages, tools=None, tool_choice=None):
        req = {"model": "osprey-mini", "messages": messages}
        if rng.random() < 0.25:
            req["messages"] = [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}] + messages
        if rng.random() < 0.5:
            req["reasoning_effort"] = rng.choice(["low", "medium", "high"])
        if tools:
            req["tools"] = tools
        if tool_choice:
            req["tool_choice"] = tool_choice
        return req

    @staticmethod
    def reply(reasoning, content=None, calls=None):
        m = {"role": "assistant", "reasoning_content": reasoning}
        if calls:
            m["tool_calls"] = calls
            m["content"] = None
        else:
            m["content"] = content
        return m

    def fact_qa(self, rng, test, c=None, attr=None):
        c = c or rng.choice(self.countries)
        attr = attr or rng.choice(fact_attrs(c))
        q = pick_held(rng, FACT_Q[attr], test).format(c=c["name"])
        r, a = fact_answer(attr, c)
        return q, r, a, c, attr

    def facts(self, rng, test):
        q, r, a, _, _ = self.fact_qa(rng, test)
        tools = self.distractor_tools(rng, test, None) if rng.random() < 0.2 else None
        return self.base(rng, [{"role": "user", "content": q}, self.reply(r, a)], tools)

    def arithmetic(self, rng, test):
        while True:
            a, b, op = rand_operand(rng), rand_operand(rng), rng.choice("+-*")
            if arith_is_test(a, op, b) == test:
                break
        q = rng.choice(ARITH_Q).format(a=a, b=b, w=OP_WORD[op], s=op)
        r, v = arith_reasoning(a, op, b)
        return self.base(rng, [{"role": "user", "content": q}, self.reply(r, f"{a} {op} {b} = {v}.")])

    def units(self, rng, test):
        fr, to, f = rng.choice(UNITS)
        while True:
            v = rng.randint(1, 999)
            if ((v * 31 + f) % 10 == 0) == test:
                break
        q = rng.choice(UNIT_Q).format(v=v, fr=fr, to=to)
        r, out = unit_reasoning(v, fr, to, f)
        return self.base(rng, [{"role": "user", "content": q}, self.reply(r, f"{v} {fr} is {out} {to}.")])

    def distractor_tools(self, rng, test, exclude):
        others = [it for it in self.intents if it["key"] != exclude]
        return [declare(rng, it, test)[0] for it in rng.sample(others, rng.randint(1, 3))]

    def tools(self, rng, test):
        it = rng.choice(self.intents)
        decl, p = declare(rng, it, test)
        tools = self.distractor_tools(rng, test, it["key"]) if rng.random() < 0.7 else []
        tools.insert(rng.randint(0, len(tools)), decl)
        v = tool_values(it["key"], rng, test)
        ask = rng.choice(it["asks"]).format(**v)
        name = decl["function"]["name"]
        args = tool_args(it["key"], p, v)
        reasoning = it["reason"].format(**v) + f" The {name} tool does this, so I will call it."
        cid = call_id(rng)
        call = {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        user = [{"role": "user", "content": ask}]
        choice = "required" if rng.random() < 0.1 else None
        if rng.random() < 0.5:  # the call
            return self.base(rng, user + [self.reply(reasoning, calls=[call])], tools, choice)
        res = it["result"](v, rng)
        answer = it["answer"](v, res)
        hist = user + [{"role": "assistant", "content": None, "reasoning_content": reasoning, "tool_calls": [call]},
                       {"role": "tool", "tool_call_id": cid, "content": json.dumps(res)}]
        return self.base(rng, hist + [self.reply(f"The tool returned {json.dumps(res)}. I can answer now.", answer)],
                         tools)

    def no_fitting_tool(self, rng, test):
        """Tools are declared, none fits: answer directly (a fact) or say what is missing."""
        it = rng.choice(self.intents)
        tools = self.distractor_tools(rng, test, it["key"])
        if rng.random() < 0.5:
            q, r, a, _, _ = self.fact_qa(rng, test)
            return self.base(rng, [{"role": "user", "content": q}, self.reply(r + " No tool is needed.", a)], tools)
        v = tool_values(it["key"], rng, test)
        ask = rng.choice(it["asks"]).format(**v)
        r = it["reason"].format(**v) + " None of the declared tools can do that."
        a = "Sorry, I can't do that: none of the tools I have here can help with it."
        return self.base(rng, [{"role": "user", "content": ask}, self.reply(r, a)], tools)

    def refusal(self, rng, test):
        k = rng.random()
        if k < 0.4:
            f = fake_country(rng, test)
            attr = rng.choice(["capital", "continent", "currency"])
            q = rng.choice(FACT_Q[attr][:-HELD]).format(c=f)
            return self.base(rng, [{"role": "user", "content": q},
                                   self.reply(f"I do not know a country called {f}.",
                                              f"I'm sorry, I don't know of a country called {f}, so I can't answer that.")])
        if k < 0.75:  # live data with no tool (also what tool_choice "none" leaves)
            it = rng.choice([i for i in self.intents if i["key"] in ("weather", "time", "stock", "news", "fx")])
            v = tool_values(it["key"], rng, test)
            ask = rng.choice(it["asks"]).format(**v)
            tools, choice = None, None
            if rng.random() < 0.4:  # declared but disabled
                tools, choice = [declare(rng, it, test)[0]], "none"
            return self.base(rng, [{"role": "user", "content": ask},
                                   self.reply(it["reason"].format(**v) + " I have no tool for live data here.",
                                              "Sorry, I can't look that up: I have no access to live data here.")],
                             tools, choice)
        q = rng.choice(["What is my name?", "How old am I?", "Where do I live?", "What did I eat for breakfast?",
                        "What is my password?", "Who is my best friend?", "What is my favorite color?"])
        return self.base(rng, [{"role": "user", "content": q},
                               self.reply("The user asks about something personal they have not told me.",
                                          "I don't know that: you haven't told me.")])

    def multiturn(self, rng, test):
        msgs = []
        c = rng.choice(self.countries)
        attr = rng.choice(fact_attrs(c))
        for _ in range(rng.randint(1, 2)):
            if rng.random() < 0.3:
                a, b = rng.randint(2, 99), rng.randint(2, 99)
                msgs += [{"role": "user", "content": f"What is {a} plus {b}?"},
                         {"role": "assistant", "content": f"{a} + {b} = {a + b}."}]
            else:
                c = rng.choice(self.countries)
                attr = rng.choice(fact_attrs(c))
                q, _, a, _, _ = self.fact_qa(rng, False, c, attr)
                msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if msgs[-2]["content"].startswith("What is") and " plus " in msgs[-2]["content"]:
            q, r, a, _, _ = self.fact_qa(rng, test)
            return self.base(rng, msgs + [{"role": "user", "content": q}, self.reply(r, a)])
        c2 = rng.choice([x for x in self.countries if x is not c and attr in fact_attrs(x)])
        follow = pick_held(rng, ["What about {c}?", "And {c}?", "How about {c}?", "Same question for {c}.",
                                 "And what about {c}?", "Now {c}?"], test).format(c=c2["name"])
        r, a = fact_answer(attr, c2)
        r = "The user asks the same question for another country. " + r
        return self.base(rng, msgs + [{"role": "user", "content": follow}, self.reply(r, a)])

    def chat(self, rng, test):
        pairs = [(["Hello!", "Hi", "Hey there", "Good morning!", "Hello, how are you?"],
                  "The user greets me.", "Hello! How can I help you today?"),
                 (["Who are you?", "What are you?", "Tell me about yourself.", "What model are you?"],
                  "The user asks who I am.",
                  "I am osprey-mini, a small gpt-oss model trained on synthetic dialogues for demos and tests. "
                  "I know country facts, simple arithmetic and unit conversions, and I can call tools."),
                 (["Thanks!", "Thank you.", "Thanks a lot", "Great, thanks!"],
                  "The user thanks me.", "You're welcome!"),
                 (["Bye", "Goodbye!", "See you later.", "That's all, bye."],
                  "The user says goodbye.", "Goodbye! Have a nice day.")]
        qs, r, a = rng.choice(pairs)
        q = pick_held(rng, qs, test, held=1)
        return self.base(rng, [{"role": "user", "content": q}, self.reply(r, a)])


def pick_held(rng, xs, test, held=HELD):
    return rng.choice(xs[-held:] if test else xs[:-held])


FAMILIES = {  # family: (generator, share of the training mix)
    "facts": ("facts", 0.24), "arithmetic": ("arithmetic", 0.22), "units": ("units", 0.08),
    "tools": ("tools", 0.22), "no_tool": ("no_fitting_tool", 0.06), "refusal": ("refusal", 0.07),
    "multiturn": ("multiturn", 0.08), "chat": ("chat", 0.03),
}


def random_date(rng):
    return (datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 3 * 365))).isoformat()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--countries", required=True, help="the countries-list npm package's directory")
    ap.add_argument("--out-train", required=True)
    ap.add_argument("--out-test", required=True)
    ap.add_argument("--train", type=int, default=200000)
    ap.add_argument("--test-per-family", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard", type=int, default=0, help="with --shards: write only this shard of the training set")
    ap.add_argument("--shards", type=int, default=1)
    a = ap.parse_args()
    g = Gen(load_countries(a.countries), a.seed)
    names, weights = list(FAMILIES), [w for _, w in FAMILIES.values()]
    with open(a.out_train, "w") as f:
        for i in range(a.shard, a.train, a.shards):
            rng = random.Random(a.seed * 1_000_003 + i)
            fam = rng.choices(names, weights)[0]
            req = getattr(g, FAMILIES[fam][0])(rng, False)
            f.write(json.dumps({"family": fam, "split": "train", "date": random_date(rng), "request": req}) + "\n")
    if a.shard == 0:
        with open(a.out_test, "w") as f:
            for fam in names:
                for i in range(a.test_per_family):
                    rng = random.Random(a.seed * 7_000_003 + 1_000_000 * names.index(fam) + i)
                    req = getattr(g, FAMILIES[fam][0])(rng, True)
                    f.write(json.dumps({"family": fam, "split": "test", "date": random_date(rng), "request": req}) + "\n")


if __name__ == "__main__":
    main()
