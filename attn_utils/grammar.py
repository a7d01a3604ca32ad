"""A tiny English→French grammar that generates parallel sentences for the attention chapters.

The d2l book trains its sequence-to-sequence models on the Tatoeba English–French corpus. That
corpus is noisy, needs a download, and far too big to learn on a laptop CPU in a minute. This module
makes a small synthetic stand-in. A hand-written grammar is enumerated exhaustively, giving a few
tens of thousands of sentence pairs, in the same format as d2l's preprocessed Tatoeba data: lower
case, one space between tokens, a space before the final ``.``, ``!`` or ``?``, and contractions and
elisions kept as single tokens (``i'm``, ``don't``, ``j'ai``, ``n'est``, ``l'oiseau``).

The grammar is small, but it contains the phenomena that make attention maps interesting, because
the words do not line up one-to-one or in the same order:

* **Adjectives after nouns, with agreement.** ``the black cat`` → ``le chat noir``,
  ``the white houses`` → ``les maisons blanches``. Only adjectives that follow the noun in French
  (colours) are used inside noun phrases.
* **Object pronouns before the verb.** ``i see him .`` → ``je le vois .``,
  ``the dogs don't know us .`` → ``les chiens ne nous connaissent pas .``
* **Negation wraps the verb.** ``i don't see the dog .`` → ``je ne vois pas le chien .`` and
  ``he isn't tall .`` → ``il n'est pas grand .`` After a negation the indefinite articles
  ``un/une/des`` become ``de`` (``d'`` before a vowel): ``i don't have a cat .`` →
  ``je n'ai pas de chat .`` In English, ``some`` becomes ``any`` in negated sentences, so
  ``some``/``des`` and ``any``/``de`` always go together.
* **Conjugation and agreement.** être, avoir, voir, regarder, manger and connaître are conjugated
  in the present for every subject; the past (passé composé) is avoir or être + participle.
  Adjectives after être, and past participles after être (``she left .`` → ``elle est partie .``),
  agree with the subject in gender and number. Determiners, nouns and adjectives agree inside the
  noun phrase (``two green apples`` → ``deux pommes vertes``).
* **One English word to several French words, and the other way round.** ``i'm home .`` →
  ``je suis chez moi .``, ``look at the cat .`` → ``regarde le chat !``, ``the bird`` →
  ``l'oiseau``.

Every sentence comes from one of ten patterns. Each pattern has a positive and a negated form,
except the bare imperatives and the questions:

1. bare imperatives: ``go .`` → ``va !``;
2. imperatives with an object: ``don't take the red book .`` → ``ne prends pas le livre rouge !``;
3. intransitive past: ``the cows left .`` → ``les vaches sont parties .``;
4. pronoun + *be* + adjective or ``home``: ``she's very tired .`` → ``elle est très fatiguée .``;
5. noun phrase + *be* + adjective: ``my white cats aren't small .`` →
   ``mes chats blancs ne sont pas petits .``;
6. present tense + object: ``she doesn't see the cats .`` → ``elle ne voit pas les chats .``;
7. object pronoun: ``the dog knows her .`` → ``le chien la connaît .``;
8. *have* + object: ``i have two cats .`` → ``j'ai deux chats .``;
9. past tense + object: ``we didn't eat any cakes .`` → ``nous n'avons pas mangé de gâteaux .``;
10. questions: ``where are my red hats ?`` → ``où sont mes chapeaux rouges ?``

A noun phrase is a determiner, a noun and optionally a colour (people get no colour). Objects take
``the``, ``a``/``an``, ``some``/``any``, ``two`` or ``three``; subjects take ``the`` or ``my``.
Verbs only take objects that make some sense: you can eat apples and cakes, and have animals and
things but not boys or girls. The colours do not care about sense, so there are blue cows.

Each English sentence has exactly one French translation, so the task is a function that a model
can learn perfectly, up to BLEU 1.0. Three rules keep it that way. ``you`` is always the singular,
informal ``tu``. ``they`` is always ``ils``. The speakers ``i``, ``you`` and ``we`` are taken to be
masculine (``we're tired .`` → ``nous sommes fatigués .``). On the English side, a pronoun subject
always contracts *be* (``i'm``, ``you're``, ``he's``, ``she's``, ``we're``, ``they're``), a noun
subject never does (``the cat is black .``), and negations are always contracted (``isn't``,
``aren't``, ``don't``, ``doesn't``, ``didn't``; English has no contraction for ``i am not``, so that
one is ``i'm not``). Imperatives end in ``!`` in French. In English the short ones (``go .``,
``run !``) come with either ``.`` or ``!``, and the longer ones with ``.``.

The four sentences d2l uses to show off its models are part of the grammar, with d2l's
translations, inside small patterns of their own: ``go .`` → ``va !``, ``i lost .`` →
``j'ai perdu .``, ``he's calm .`` → ``il est calme .`` and ``i'm home .`` →
``je suis chez moi .`` They are available as :data:`PROBES`.

**Long sentences.** :func:`generate_long_pairs` builds sentences of 5 to 30 English tokens from the same words,
with constructions that put distant words in relation: relative clauses (``the cat that the dogs see`` →
``le chat que les chiens voient``; in the past the participle agrees with the noun before it, ``the apples that he
ate`` → ``les pommes qu'il a mangées``), agreement across the added material (``the cows that the boy sees are
tired`` → ``les vaches que le garçon voit sont fatiguées``), adjuncts (``near the dogs`` → ``près des chiens``,
``today``, ``yesterday``) and two clauses joined by ``and`` or ``but``. Its sentences are drawn at random, spread
evenly over the lengths, and each English sentence again has exactly one translation.

>>> pairs = generate_pairs(seed=0, num_pairs=5000)
>>> len(pairs), sorted(pairs[:4]) == sorted(PROBES)
(5000, True)
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import NamedTuple

from ._checks import check_positive_int, check_seed

__all__ = ["PROBES", "generate_long_pairs", "generate_pairs", "is_grammatical", "LANGUAGES"]

LANGUAGES = ("en", "fr")
"""The two sides of the grammar."""

PROBES: tuple[tuple[str, str], ...] = (
    ("go .", "va !"),
    ("i lost .", "j'ai perdu ."),
    ("he's calm .", "il est calme ."),
    ("i'm home .", "je suis chez moi ."),
)
"""d2l's four probe sentences with their French, as ``(english, french)`` pairs in d2l's order."""

# ---------------------------------------------------------------------------------------------
# Lexicon
# ---------------------------------------------------------------------------------------------


class _Noun(NamedTuple):
    en_sg: str
    en_pl: str
    fr_sg: str
    fr_pl: str
    fem: bool
    kind: str  # "person", "animal", "thing" or "food": decides which verbs/adjectives fit


class _Adj(NamedTuple):
    en: str
    fr: tuple[str, str, str, str]  # masculine singular, feminine singular, masc. plural, fem. plural


class _Subject(NamedTuple):
    en: str  # "i", "the cat"
    en_be: str  # "i'm", "the cat is": pronouns contract "be", noun phrases don't
    en_be_neg: str  # "i'm not", "the cats aren't"
    third_sg: bool  # English verb takes -s ("he sees", "the cat sees")
    fr: str  # "je", "le chat"
    slot: int  # conjugation slot: 0 je, 1 tu, 2 il/elle, 3 nous, 4 ils/elles
    fem: bool
    plural: bool
    person: str  # "1" or "2" for first/second person, "" for third (to rule out "i see me")
    fr_stressed: str  # stressed pronoun for "chez moi"; "" for noun subjects


class _ObjPronoun(NamedTuple):
    en: str
    fr: str
    person: str


class _TransVerb(NamedTuple):
    en: str  # base form, also used after do/does/did
    en_3sg: str
    en_past: str
    fr: tuple[str, str, str, str, str]  # present tense, in _Subject.slot order
    fr_imp: str  # imperative (tu)
    fr_pp: str  # past participle (all these verbs take avoir)
    objects: frozenset[str]  # English singular nouns that make sense as its object


class _IntransVerb(NamedTuple):
    en_past: str
    en: str  # base form after "didn't"
    fr_pp: str
    etre: bool  # passé composé with être: the participle agrees with the subject


_ETRE: tuple[str, str, str, str, str] = ("suis", "es", "est", "sommes", "sont")
_AVOIR: tuple[str, str, str, str, str] = ("ai", "as", "a", "avons", "ont")

# Subject pronouns. Rule for gender: "i", "you" and "we" are masculine; "you" is always "tu";
# "they" is always "ils".
_PRONOUNS: tuple[_Subject, ...] = (
    _Subject("i", "i'm", "i'm not", False, "je", 0, False, False, "1", "moi"),
    _Subject("you", "you're", "you aren't", False, "tu", 1, False, False, "2", "toi"),
    _Subject("he", "he's", "he isn't", True, "il", 2, False, False, "", "lui"),
    _Subject("she", "she's", "she isn't", True, "elle", 2, True, False, "", "elle"),
    _Subject("we", "we're", "we aren't", False, "nous", 3, False, True, "1", "nous"),
    _Subject("they", "they're", "they aren't", False, "ils", 4, False, True, "", "eux"),
)

# Object pronouns, which go before the French verb. "it" is left out because French would
# need the noun's gender ("le" or "la") to translate it.
_OBJ_PRONOUNS: tuple[_ObjPronoun, ...] = (
    _ObjPronoun("me", "me", "1"),
    _ObjPronoun("you", "te", "2"),
    _ObjPronoun("him", "le", ""),
    _ObjPronoun("her", "la", ""),
    _ObjPronoun("us", "nous", "1"),
    _ObjPronoun("them", "les", ""),
)

# Nouns. No feminine noun starts with a vowel, so "ma" never has to become "mon" ("mon amie").
_NOUNS: tuple[_Noun, ...] = (
    _Noun("boy", "boys", "garçon", "garçons", False, "person"),
    _Noun("girl", "girls", "fille", "filles", True, "person"),
    _Noun("cat", "cats", "chat", "chats", False, "animal"),
    _Noun("dog", "dogs", "chien", "chiens", False, "animal"),
    _Noun("horse", "horses", "cheval", "chevaux", False, "animal"),
    _Noun("bird", "birds", "oiseau", "oiseaux", False, "animal"),  # l'oiseau, d'oiseaux
    _Noun("cow", "cows", "vache", "vaches", True, "animal"),
    _Noun("book", "books", "livre", "livres", False, "thing"),
    _Noun("car", "cars", "voiture", "voitures", True, "thing"),
    _Noun("house", "houses", "maison", "maisons", True, "thing"),
    _Noun("hat", "hats", "chapeau", "chapeaux", False, "thing"),
    _Noun("flower", "flowers", "fleur", "fleurs", True, "thing"),
    _Noun("apple", "apples", "pomme", "pommes", True, "food"),  # "an apple"
    _Noun("cake", "cakes", "gâteau", "gâteaux", False, "food"),
)

# Colours follow the noun in French, so they are the adjectives used inside noun phrases
# (never with people). They can also follow "is/are" for animals, things and food.
_COLOURS: tuple[_Adj, ...] = (
    _Adj("black", ("noir", "noire", "noirs", "noires")),
    _Adj("white", ("blanc", "blanche", "blancs", "blanches")),
    _Adj("red", ("rouge", "rouge", "rouges", "rouges")),
    _Adj("green", ("vert", "verte", "verts", "vertes")),
    _Adj("blue", ("bleu", "bleue", "bleus", "bleues")),
)

# Adjectives used only after "be" (grand, petit go before the noun in French, so they never
# appear inside a noun phrase here).
_PERSON_ADJS: tuple[_Adj, ...] = (
    _Adj("tall", ("grand", "grande", "grands", "grandes")),
    _Adj("small", ("petit", "petite", "petits", "petites")),
    _Adj("calm", ("calme", "calme", "calmes", "calmes")),
    _Adj("tired", ("fatigué", "fatiguée", "fatigués", "fatiguées")),
    _Adj("happy", ("heureux", "heureuse", "heureux", "heureuses")),
    _Adj("sad", ("triste", "triste", "tristes", "tristes")),
    _Adj("ready", ("prêt", "prête", "prêts", "prêtes")),
    _Adj("sick", ("malade", "malade", "malades", "malades")),
)
_ANIMAL_ADJS: tuple[_Adj, ...] = tuple(
    a for a in _PERSON_ADJS if a.en in {"small", "calm", "tired", "happy", "sad", "sick"}
)
_THING_ADJS: tuple[_Adj, ...] = tuple(a for a in _PERSON_ADJS if a.en == "small")


def _nouns_of(*kinds: str) -> frozenset[str]:
    return frozenset(n.en_sg for n in _NOUNS if n.kind in kinds)


_ALL = _nouns_of("person", "animal", "thing", "food")
_TAKEABLE = frozenset({"book", "car", "hat", "flower", "apple", "cake"})
_FOOD = _nouns_of("food")
_LOSABLE = _nouns_of("animal") | {"book", "car", "hat", "flower"}
_OWNABLE = _nouns_of("animal", "thing", "food")  # no "i have two girls"

# English base, 3rd person singular, past; French present (je, tu, il, nous, ils), imperative, participle.
_SEE = _TransVerb(
    "see", "sees", "saw", ("vois", "vois", "voit", "voyons", "voient"), "vois", "vu", _ALL
)
_TAKE = _TransVerb(
    "take", "takes", "took", ("prends", "prends", "prend", "prenons", "prennent"), "prends", "pris", _TAKEABLE
)
_EAT = _TransVerb(
    "eat", "eats", "ate", ("mange", "manges", "mange", "mangeons", "mangent"), "mange", "mangé", _FOOD
)
_LOSE = _TransVerb(
    "lose", "loses", "lost", ("perds", "perds", "perd", "perdons", "perdent"), "perds", "perdu", _LOSABLE
)
_WATCH = _TransVerb(
    "watch", "watches", "watched", ("regarde", "regardes", "regarde", "regardons", "regardent"),
    "regarde", "regardé", _ALL,
)
_KNOW = _TransVerb(
    "know", "knows", "knew", ("connais", "connais", "connaît", "connaissons", "connaissent"),
    "connais", "connu", _ALL,
)
_LOOK_AT = _WATCH._replace(en="look at")  # imperative only: "look at the cat ." → "regarde le chat !"

# Verbs per pattern. All verbs that take an object pronoun start with a consonant in French,
# so "je le vois" never needs an elision.
_PRESENT_VERBS: tuple[_TransVerb, ...] = (_SEE, _EAT)
_PRONOUN_VERBS: tuple[_TransVerb, ...] = (_SEE, _WATCH, _KNOW)
_PAST_VERBS: tuple[_TransVerb, ...] = (_LOSE, _TAKE, _EAT)
_IMPERATIVE_VERBS: tuple[_TransVerb, ...] = (_LOOK_AT, _TAKE, _EAT)

_INTRANS_VERBS: tuple[_IntransVerb, ...] = (
    _IntransVerb("lost", "lose", "perdu", False),  # "i lost ." → "j'ai perdu ." (d2l probe)
    _IntransVerb("won", "win", "gagné", False),
    _IntransVerb("slept", "sleep", "dormi", False),
    _IntransVerb("ate", "eat", "mangé", False),
    _IntransVerb("left", "leave", "parti", True),  # "she left ." → "elle est partie ."
    _IntransVerb("came", "come", "venu", True),
)

# Bare imperatives: "go ." → "va !" (d2l probe), "run !" → "cours !".
_IMPERATIVES: tuple[tuple[str, str], ...] = (
    ("go", "va"),
    ("run", "cours"),
    ("come", "viens"),
    ("wait", "attends"),
    ("stop", "arrête"),
)

# Determiners of object noun phrases: (English, plural). "a" becomes "an" before a vowel and
# "some" becomes "any" under negation.
_OBJ_DETS: tuple[tuple[str, bool], ...] = (
    ("the", False),
    ("a", False),
    ("the", True),
    ("some", True),
    ("two", True),
    ("three", True),
)
# Determiners of subject noun phrases (and of "where is ...?").
_SUBJ_DETS: tuple[tuple[str, bool], ...] = (
    ("the", False),
    ("the", True),
    ("my", False),
    ("my", True),
)

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

_FR_VOWELS = frozenset("aeiouyéèêâîôû")
_FR_ELIDABLE = {"je": "j'", "que": "qu'", "ne": "n'", "le": "l'", "la": "l'", "de": "d'", "me": "m'", "te": "t'"}


def _fr_words(parts: list[str]) -> str:
    """Join French words, applying elision (je ai → j'ai, ne est → n'est, le oiseau → l'oiseau)."""
    out: list[str] = []
    for word in " ".join(parts).split():
        if out and out[-1] in _FR_ELIDABLE and word[0] in _FR_VOWELS:
            out[-1] = _FR_ELIDABLE[out[-1]] + word
        else:
            out.append(word)
    return " ".join(out)


def _fr_join(parts: list[str], punct: str) -> str:
    """A French sentence: elided words, a space, the final punctuation."""
    return _fr_words(parts) + " " + punct


def _en_join(parts: list[str], punct: str) -> str:
    """Join English words, turning "a" into "an" before a vowel (an apple)."""
    words = " ".join(parts).split()
    out = ["an" if w == "a" and i + 1 < len(words) and words[i + 1][0] in "aeiou" else w for i, w in enumerate(words)]
    return " ".join(out) + " " + punct


def _adj_fr(adj: _Adj, fem: bool, plural: bool) -> str:
    return adj.fr[2 * plural + fem]


def _fr_det(det: str, fem: bool, plural: bool, negated: bool) -> str:
    """French determiner. Under negation the indefinite un/une/des become de."""
    if det == "the":
        return "les" if plural else ("la" if fem else "le")
    if det == "my":
        return "mes" if plural else ("ma" if fem else "mon")
    if det in ("a", "some"):
        if negated:
            return "de"
        return "des" if plural else ("une" if fem else "un")
    return {"two": "deux", "three": "trois"}[det]


def _noun_phrases(
    dets: tuple[tuple[str, bool], ...], nouns: frozenset[str], negated: bool = False
) -> Iterator[tuple[str, str, _Noun, bool, _Adj | None]]:
    """Yield (English, French, noun, plural, colour) for det + noun + optional colour.

    People get no colour. English: "the black cats"; French: "les chats noirs".
    """
    for noun in _NOUNS:
        if noun.en_sg not in nouns:
            continue
        adjs: tuple[_Adj | None, ...] = (None,)
        if noun.kind != "person":
            adjs += _COLOURS
        for det, plural in dets:
            en_det = "any" if det == "some" and negated else det
            fr_det = _fr_det(det, noun.fem, plural, negated)
            en_noun, fr_noun = (noun.en_pl, noun.fr_pl) if plural else (noun.en_sg, noun.fr_sg)
            for adj in adjs:
                if adj is None:
                    yield f"{en_det} {en_noun}", f"{fr_det} {fr_noun}", noun, plural, adj
                else:
                    fr_adj = _adj_fr(adj, noun.fem, plural)
                    yield (f"{en_det} {adj.en} {en_noun}", f"{fr_det} {fr_noun} {fr_adj}", noun, plural, adj)


def _noun_subjects(nouns: frozenset[str]) -> Iterator[tuple[_Subject, _Noun, _Adj | None]]:
    """Noun-phrase subjects ("the cat", "my black cats", ...), with their noun and colour."""
    for en, fr, noun, plural, adj in _noun_phrases(_SUBJ_DETS, nouns):
        be, be_neg = ("are", "aren't") if plural else ("is", "isn't")
        subj = _Subject(
            en=en, en_be=f"{en} {be}", en_be_neg=f"{en} {be_neg}", third_sg=not plural, fr=_fr_words([fr]),
            slot=4 if plural else 2, fem=noun.fem, plural=plural, person="", fr_stressed="",
        )
        yield subj, noun, adj


def _animate_subjects() -> tuple[_Subject, ...]:
    return tuple(s for s, _, _ in _noun_subjects(_nouns_of("person", "animal")))


def _en_verb(subj: _Subject, verb: _TransVerb, negated: bool) -> str:
    """English present tense: "sees", "see", "doesn't see", "don't see"."""
    if negated:
        return ("doesn't " if subj.third_sg else "don't ") + verb.en
    return verb.en_3sg if subj.third_sg else verb.en


def _fr_neg(subj: _Subject, verb: str, negated: bool) -> list[str]:
    """French subject + (ne) verb (pas)."""
    return [subj.fr, "ne", verb, "pas"] if negated else [subj.fr, verb]


# ---------------------------------------------------------------------------------------------
# Patterns: each yields (english, french)
# ---------------------------------------------------------------------------------------------

_Pairs = Iterator[tuple[str, str]]


def _pattern_imperative() -> _Pairs:
    # go . → va !    run ! → cours !
    for en, fr in _IMPERATIVES:
        for punct in (".", "!"):
            yield f"{en} {punct}", f"{fr} !"


def _pattern_imperative_object() -> _Pairs:
    # take the red book . → prends le livre rouge !    don't eat any apples . → ne mange pas de pommes !
    for verb in _IMPERATIVE_VERBS:
        for negated in (False, True):
            for en_np, fr_np, *_ in _noun_phrases(_OBJ_DETS, verb.objects, negated):
                en = (["don't"] if negated else []) + [verb.en, en_np]
                fr = (["ne", verb.fr_imp, "pas"] if negated else [verb.fr_imp]) + [fr_np]
                yield _en_join(en, "."), _fr_join(fr, "!")


def _pattern_intransitive_past() -> _Pairs:
    # i lost . → j'ai perdu .    the cows didn't leave . → les vaches ne sont pas parties .
    for subj in _PRONOUNS + _animate_subjects():
        for verb in _INTRANS_VERBS:
            aux = (_ETRE if verb.etre else _AVOIR)[subj.slot]
            pp = verb.fr_pp
            if verb.etre:  # agreement with the subject
                pp += ("e" if subj.fem else "") + ("s" if subj.plural else "")
            for negated in (False, True):
                en = [subj.en, "didn't", verb.en] if negated else [subj.en, verb.en_past]
                yield _en_join(en, "."), _fr_join(_fr_neg(subj, aux, negated) + [pp], ".")


def _be_adjective(subj: _Subject, adjs: tuple[_Adj, ...]) -> _Pairs:
    """Subject + (not) be + adjective agreeing with the subject, also with "very" (très)."""
    for negated in (False, True):
        en_be = subj.en_be_neg if negated else subj.en_be
        fr_be = _fr_neg(subj, _ETRE[subj.slot], negated)
        for adj in adjs:
            fr_adj = _adj_fr(adj, subj.fem, subj.plural)
            yield _en_join([en_be, adj.en], "."), _fr_join(fr_be + [fr_adj], ".")
            if adj not in _COLOURS and adj.en != "ready":  # no "very ready"
                yield (_en_join([en_be, "very", adj.en], "."), _fr_join(fr_be + ["très", fr_adj], "."))


def _pattern_be_pronoun() -> _Pairs:
    # he's calm . → il est calme .    we aren't very tired . → nous ne sommes pas très fatigués .
    # i'm home . → je suis chez moi .    they're home . → ils sont chez eux .
    for subj in _PRONOUNS:
        yield from _be_adjective(subj, _PERSON_ADJS)
        for negated in (False, True):
            en_be = subj.en_be_neg if negated else subj.en_be
            fr_be = _fr_neg(subj, _ETRE[subj.slot], negated)
            yield _en_join([en_be, "home"], "."), _fr_join(fr_be + ["chez", subj.fr_stressed], ".")


def _pattern_be_noun() -> _Pairs:
    # the girl is tall . → la fille est grande .    my cars aren't red . → mes voitures ne sont pas rouges .
    # the white horse is very tired . → le cheval blanc est très fatigué .
    adjs_by_kind = {
        "person": _PERSON_ADJS,
        "animal": _ANIMAL_ADJS + _COLOURS,
        "thing": _THING_ADJS + _COLOURS,
        "food": _THING_ADJS + _COLOURS,
    }
    for subj, noun, colour in _noun_subjects(_ALL):
        adjs = adjs_by_kind[noun.kind]
        if colour is not None:  # no "the black cat is white ."
            adjs = tuple(a for a in adjs if a not in _COLOURS)
        yield from _be_adjective(subj, adjs)


def _pattern_present_object() -> _Pairs:
    # she doesn't see the cats . → elle ne voit pas les chats .
    for subj in _PRONOUNS:
        for verb in _PRESENT_VERBS:
            for negated in (False, True):
                fr_verb = _fr_neg(subj, verb.fr[subj.slot], negated)
                for en_np, fr_np, *_ in _noun_phrases(_OBJ_DETS, verb.objects, negated):
                    en = [subj.en, _en_verb(subj, verb, negated), en_np]
                    yield _en_join(en, "."), _fr_join(fr_verb + [fr_np], ".")


def _pattern_object_pronoun() -> _Pairs:
    # i see him . → je le vois .    the dog doesn't know us . → le chien ne nous connaît pas .
    for subj in _PRONOUNS + _animate_subjects():
        for obj in _OBJ_PRONOUNS:
            if subj.person and subj.person == obj.person:  # no "i see me", "we see me"
                continue
            for verb in _PRONOUN_VERBS:
                for negated in (False, True):
                    en = [subj.en, _en_verb(subj, verb, negated), obj.en]
                    fr_verb = verb.fr[subj.slot]
                    fr = [subj.fr, "ne", obj.fr, fr_verb, "pas"] if negated else [subj.fr, obj.fr, fr_verb]
                    yield _en_join(en, "."), _fr_join(fr, ".")


def _pattern_have() -> _Pairs:
    # i have two cats . → j'ai deux chats .    they don't have a car . → ils n'ont pas de voiture .
    for subj in _PRONOUNS:
        for negated in (False, True):
            if negated:
                en_have = "doesn't have" if subj.third_sg else "don't have"
            else:
                en_have = "has" if subj.third_sg else "have"
            fr_have = _fr_neg(subj, _AVOIR[subj.slot], negated)
            for en_np, fr_np, *_ in _noun_phrases(_OBJ_DETS, _OWNABLE, negated):
                yield _en_join([subj.en, en_have, en_np], "."), _fr_join(fr_have + [fr_np], ".")


def _pattern_past_object() -> _Pairs:
    # we lost the black cat . → nous avons perdu le chat noir .    i didn't eat any cakes . → ...
    for subj in _PRONOUNS:
        for verb in _PAST_VERBS:
            for negated in (False, True):
                en_verb = f"didn't {verb.en}" if negated else verb.en_past
                fr_verb = _fr_neg(subj, _AVOIR[subj.slot], negated) + [verb.fr_pp]
                for en_np, fr_np, *_ in _noun_phrases(_OBJ_DETS, verb.objects, negated):
                    yield _en_join([subj.en, en_verb, en_np], "."), _fr_join(fr_verb + [fr_np], ".")


def _pattern_where() -> _Pairs:
    # where are my red hats ? → où sont mes chapeaux rouges ?
    for en_np, fr_np, _, plural, _ in _noun_phrases(_SUBJ_DETS, _ALL):
        en_be, fr_be = ("are", "sont") if plural else ("is", "est")
        yield _en_join(["where", en_be, en_np], "?"), _fr_join(["où", fr_be, fr_np], "?")


_PATTERN_FUNCS = (
    ("imperative", _pattern_imperative),
    ("imperative + object", _pattern_imperative_object),
    ("intransitive past", _pattern_intransitive_past),
    ("pronoun be adjective/home", _pattern_be_pronoun),
    ("noun be adjective", _pattern_be_noun),
    ("present + object", _pattern_present_object),
    ("object pronoun", _pattern_object_pronoun),
    ("have + object", _pattern_have),
    ("past + object", _pattern_past_object),
    ("where question", _pattern_where),
)


def _check_format(
    sentence: str, ends: tuple[str, ...] = (".", "!", "?"), min_tokens: int = 2, max_tokens: int = 11
) -> None:
    """Raise unless ``sentence`` is lower case, single-spaced, ends with one of ``ends`` (and has it nowhere else),
    and has ``min_tokens`` to ``max_tokens`` tokens."""
    tokens = sentence.split(" ")
    if (
        sentence != sentence.lower()
        or "" in tokens
        or tokens[-1] not in ends
        or any(t in ends for t in tokens[:-1])
        or not min_tokens <= len(tokens) <= max_tokens
    ):
        raise RuntimeError(f"grammar bug: badly formatted sentence {sentence!r}")


@functools.lru_cache(maxsize=1)
def _grammar() -> tuple[tuple[str, str, str], ...]:
    """All distinct (english, french, pattern name) triples, sorted by English sentence."""
    table: dict[str, tuple[str, str]] = {}
    for name, func in _PATTERN_FUNCS:
        for en, fr in func():
            _check_format(en)
            _check_format(fr)
            if en in table and table[en][0] != fr:
                raise RuntimeError(f"grammar bug: {en!r} translates to both {table[en][0]!r} and {fr!r}")
            table.setdefault(en, (fr, name))
    for en, fr in PROBES:
        if table.get(en, ("",))[0] != fr:
            raise RuntimeError(f"grammar bug: probe {en!r} does not translate to {fr!r}")
    return tuple(sorted((en, fr, name) for en, (fr, name) in table.items()))


@functools.lru_cache(maxsize=1)
def _sentences() -> dict[str, frozenset[str]]:
    triples = _grammar()
    return {"en": frozenset(en for en, _, _ in triples), "fr": frozenset(fr for _, fr, _ in triples)}


def is_grammatical(sentence: str, language: str = "en") -> bool:
    """Whether the (short) grammar can produce ``sentence``: whether it is one of the sentences of
    :func:`generate_pairs`, on the English or the French side.

    The grammar is finite and enumerated, so the answer is exact: a sentence with a wrong agreement
    (``les chats noir``), a missing part of a negation, a verb with an object it does not take, or a sentence of
    real English that the grammar does not cover is not grammatical here.

    Args:
        sentence: tokens separated by single spaces, lower case, as the corpus writes them (``"i see him ."``).
        language: ``"en"`` or ``"fr"``.
    Returns:
        True if the grammar produces ``sentence`` in that language.

    >>> is_grammatical("les chats noirs dorment ."), is_grammatical("je le vois .", "fr")
    (False, True)
    >>> is_grammatical("the cats are black ."), is_grammatical("the cats is black .")
    (True, False)
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence: expected a str, got {type(sentence).__name__}")
    if language not in LANGUAGES:
        raise ValueError(f"language: expected one of {LANGUAGES}, got {language!r}")
    return sentence in _sentences()[language]


def generate_pairs(seed: int = 0, num_pairs: int | None = None) -> list[tuple[str, str]]:
    """Distinct (english, french) pairs from the grammar, deterministic for ``seed``.

    The full grammar yields more than 30,000 distinct pairs. The order is *stratified*: the four :data:`PROBES` come
    first, then the patterns take turns (one sentence of each pattern that has sentences left, in a fixed pattern
    order), each pattern's sentences in a seed-dependent shuffle. So any prefix of the order covers every pattern
    about equally: small patterns (imperatives, pronoun + be) are not drowned by the large ones, and ``num_pairs``
    pairs always include the probes. The order depends only on ``seed``, not on the Python version or on hash
    randomisation.

    Args:
        seed: seed of the shuffle.
        num_pairs: how many pairs to return (the first of the order); None returns all of them.
    Returns:
        a list of ``(english, french)`` pairs.
    Raises:
        TypeError: ``seed`` or ``num_pairs`` is not an int (bool is not an int here).
        ValueError: ``num_pairs`` is below 4 or above the number of distinct pairs.

    >>> sorted(generate_pairs(num_pairs=4)) == sorted(PROBES)
    True
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    if num_pairs is not None and (not isinstance(num_pairs, int) or isinstance(num_pairs, bool)):
        raise TypeError(f"num_pairs: expected an int or None, got {type(num_pairs).__name__}")
    triples = _grammar()  # sorted, hence independent of hashing
    total = len(triples)
    if num_pairs is not None and not 4 <= num_pairs <= total:
        raise ValueError(f"num_pairs: expected an int in [4, {total}] or None, got {num_pairs}")
    probes = set(PROBES)
    rng = random.Random(seed)
    head = list(PROBES)
    rng.shuffle(head)
    by_pattern: dict[str, list[tuple[str, str]]] = {name: [] for name, _ in _PATTERN_FUNCS}
    for en, fr, name in triples:
        if (en, fr) not in probes:
            by_pattern[name].append((en, fr))
    queues = []
    for name, _ in _PATTERN_FUNCS:
        rng.shuffle(by_pattern[name])
        queues.append(by_pattern[name])
    order = head
    for turn in range(max(len(q) for q in queues)):
        order.extend(q[turn] for q in queues if turn < len(q))
    return order if num_pairs is None else order[:num_pairs]


# ---------------------------------------------------------------------------------------------
# Long sentences: relative clauses, coordination and adjuncts
# ---------------------------------------------------------------------------------------------
#
# The sentences above are 2 to 7 English tokens long: short enough for a fixed context vector. The long grammar
# builds sentences of up to about 30 tokens from the same words, with constructions that put distant words in
# relation:
#
# * relative clauses on a noun, with the subject ("the dog that sees the cats" → "le chien qui voit les chats") or
#   the object relativised ("the cat that the girls know" → "le chat que les filles connaissent"), in the present or
#   the past; in the past, the participle agrees with the noun the clause describes, which stands before it
#   ("the apples that he ate" → "les pommes qu'il a mangées");
# * agreement across the added material: the verb and the adjective agree with the head noun, not with the nearer
#   noun of the relative clause ("the cows that the boy sees are tired" → "les vaches que le garçon voit sont
#   fatiguées");
# * adjuncts at the end of a clause: "in", "near" and "with" + a noun phrase (near the dog → près du chien,
#   near the cats → près des chats), "today", and "yesterday" with the past;
# * two clauses joined by "and" or "but" (et, mais).
#
# The main clause may be negated (ne ... pas, with un/une/des → de on its object); relative clauses are not.

_LONG_PRESENT: tuple[_TransVerb, ...] = (_SEE, _EAT, _WATCH, _KNOW)
_LONG_PAST: tuple[_TransVerb, ...] = (_SEE, _EAT, _WATCH, _TAKE, _LOSE)
_LONG_INTRANS: tuple[_IntransVerb, ...] = tuple(v for v in _INTRANS_VERBS if v.en_past != "ate")
_PLACES: tuple[tuple[str, str], ...] = (("in", "dans"), ("near", "près de"), ("with", "avec"))
_IN_NOUNS = frozenset({"house", "car"})  # "in the house", "dans la voiture"
_CONJUNCTIONS: tuple[tuple[str, str], ...] = (("and", "et"), ("but", "mais"))
_LONG_MAX_TOKENS = 40


class _NP(NamedTuple):
    en: str
    fr: str  # French words, elision applied
    noun: _Noun
    plural: bool
    colour: _Adj | None


def _long_np(rng: random.Random, dets: tuple[tuple[str, bool], ...], nouns: frozenset[str], negated: bool = False,
             relative: float = 0.0) -> _NP:
    """A noun phrase: determiner, noun, optional colour (not on people), and with probability ``relative`` a
    relative clause."""
    noun = rng.choice([n for n in _NOUNS if n.en_sg in nouns])
    det, plural = rng.choice(dets)
    colour = rng.choice((None,) + _COLOURS) if noun.kind != "person" and rng.random() < 0.4 else None
    en_det = "any" if det == "some" and negated else det
    fr_det = _fr_det(det, noun.fem, plural, negated)
    en_noun, fr_noun = (noun.en_pl, noun.fr_pl) if plural else (noun.en_sg, noun.fr_sg)
    en = [en_det] + ([colour.en] if colour else []) + [en_noun]
    fr = [fr_det, fr_noun] + ([_adj_fr(colour, noun.fem, plural)] if colour else [])
    if rng.random() < relative:
        en_rel, fr_rel = _relative_clause(rng, noun, plural)
        en, fr = en + en_rel, fr + fr_rel
    return _NP(" ".join(en), _fr_words(fr), noun, plural, colour)


def _simple_subject(rng: random.Random, animate_only: bool = True) -> _Subject:
    """A pronoun or a short noun phrase as the subject of a relative clause."""
    if rng.random() < 0.5:
        return rng.choice(_PRONOUNS)
    np = _long_np(rng, _SUBJ_DETS, _nouns_of("person", "animal") if animate_only else _ALL)
    return _np_subject(np)


def _np_subject(np: _NP) -> _Subject:
    be, be_neg = ("are", "aren't") if np.plural else ("is", "isn't")
    return _Subject(
        en=np.en, en_be=f"{np.en} {be}", en_be_neg=f"{np.en} {be_neg}", third_sg=not np.plural, fr=np.fr,
        slot=4 if np.plural else 2, fem=np.noun.fem, plural=np.plural, person="", fr_stressed="",
    )


def _relative_clause(rng: random.Random, head: _Noun, plural: bool) -> tuple[list[str], list[str]]:
    """ "that ..." → "qui ..." or "que ...", describing ``head``."""
    slot = 4 if plural else 2
    subject_relatives = [v for v in _LONG_PRESENT if head.kind in ("person", "animal")]
    if subject_relatives and rng.random() < 0.4:
        # the dog that sees the cats → le chien qui voit les chats
        verb = rng.choice(subject_relatives)
        obj = _long_np(rng, _OBJ_DETS, verb.objects)
        return ["that", verb.en if plural else verb.en_3sg, obj.en], ["qui", verb.fr[slot], obj.fr]
    subj = _simple_subject(rng)
    if rng.random() < 0.5:
        # the cat that the girls know → le chat que les filles connaissent
        verbs = [v for v in _LONG_PRESENT if head.en_sg in v.objects]
        verb = rng.choice(verbs)
        return ["that", subj.en, _en_verb(subj, verb, False)], ["que", subj.fr, verb.fr[subj.slot]]
    # the apples that he ate → les pommes qu'il a mangées (the participle agrees with the head, before it)
    verbs = [v for v in _LONG_PAST if head.en_sg in v.objects]
    verb = rng.choice(verbs)
    pp = verb.fr_pp + ("e" if head.fem else "")
    pp += "s" if plural and not pp.endswith("s") else ""  # pris, prise, pris, prises
    return ["that", subj.en, verb.en_past], ["que", subj.fr, _AVOIR[subj.slot], pp]


def _adjunct(rng: random.Random, past: bool) -> tuple[list[str], list[str]]:
    """ "near the dog" → "près du chien", "today", "yesterday" (past only)."""
    if rng.random() < 0.3:
        # "yesterday" only with the past, and not after a relative clause in the present ("that i eat yesterday")
        return (["yesterday"], ["hier"]) if past and rng.random() < 0.5 else (["today"], ["aujourd'hui"])
    en_prep, fr_prep = rng.choice(_PLACES)
    nouns = _IN_NOUNS if en_prep == "in" else _ALL
    dets = tuple(d for d in _OBJ_DETS if d[0] != "some") if fr_prep == "près de" else _OBJ_DETS  # no "de des"
    np = _long_np(rng, dets, nouns)
    fr = np.fr
    if fr_prep == "près de":  # de + le → du, de + les → des
        if fr.startswith("le "):
            return [en_prep, np.en], ["près", "du", fr[3:]]
        if fr.startswith("les "):
            return [en_prep, np.en], ["près", "des", fr[4:]]
    return [en_prep, np.en], fr_prep.split() + [fr]


def _long_clause(rng: random.Random) -> tuple[list[str], list[str]]:
    """One clause: a subject (a pronoun, or a noun phrase that may carry a relative clause), a predicate, and
    maybe an adjunct."""
    negated = rng.random() < 0.3
    kind = rng.choice(("be", "present", "past", "intransitive"))
    if rng.random() < 0.35:
        subj, noun = rng.choice(_PRONOUNS), None
    else:
        np = _long_np(rng, _SUBJ_DETS, _nouns_of("person", "animal") if kind != "be" else _ALL, relative=0.6)
        subj, noun = _np_subject(np), np
    past = kind in ("past", "intransitive")
    if kind == "be":
        if noun is None or noun.noun.kind == "person":
            adjs: tuple[_Adj, ...] = _PERSON_ADJS
        else:
            adjs = (_ANIMAL_ADJS if noun.noun.kind == "animal" else _THING_ADJS) + (
                () if noun.colour else _COLOURS
            )
        adj = rng.choice(adjs)
        very = adj not in _COLOURS and adj.en != "ready" and rng.random() < 0.3
        en = [subj.en_be_neg if negated else subj.en_be] + (["very"] if very else []) + [adj.en]
        fr = _fr_neg(subj, _ETRE[subj.slot], negated) + (["très"] if very else []) + [
            _adj_fr(adj, subj.fem, subj.plural)
        ]
    elif kind == "intransitive":
        verb = rng.choice(_LONG_INTRANS)
        aux = (_ETRE if verb.etre else _AVOIR)[subj.slot]
        pp = verb.fr_pp + (("e" if subj.fem else "") + ("s" if subj.plural else "") if verb.etre else "")
        en = [subj.en, "didn't", verb.en] if negated else [subj.en, verb.en_past]
        fr = _fr_neg(subj, aux, negated) + [pp]
    else:
        verb = rng.choice(_LONG_PRESENT if kind == "present" else _LONG_PAST)
        obj = _long_np(rng, _OBJ_DETS, verb.objects, negated=negated, relative=0.4 if noun is None else 0.2)
        if kind == "present":
            en = [subj.en, _en_verb(subj, verb, negated), obj.en]
            fr = _fr_neg(subj, verb.fr[subj.slot], negated) + [obj.fr]
        else:
            en = [subj.en, f"didn't {verb.en}" if negated else verb.en_past, obj.en]
            fr = _fr_neg(subj, _AVOIR[subj.slot], negated) + [verb.fr_pp, obj.fr]
    if rng.random() < 0.5:
        en_adj, fr_adj = _adjunct(rng, past and "that" not in " ".join(en).split())
        en, fr = en + en_adj, fr + fr_adj
    return en, fr


def _clause_pool(rng: random.Random, draws: int) -> dict[int, list[tuple[list[str], list[str]]]]:
    """Distinct clauses from ``draws`` random draws, grouped by their number of English tokens."""
    pool: dict[int, list[tuple[list[str], list[str]]]] = {}
    seen: set[str] = set()
    for _ in range(draws):
        en, fr = _long_clause(rng)
        words = " ".join(en).split()
        key = " ".join(words)
        if key not in seen:
            seen.add(key)
            pool.setdefault(len(words), []).append((en, fr))
    return pool


def _long_sentence(rng: random.Random, pool: dict[int, list[tuple[list[str], list[str]]]], n: int) -> tuple[
    str, str
] | None:
    """A sentence of ``n`` English tokens (final "." included): one clause, or two joined by "and"/"but"."""
    single = n - 1 in pool
    doubles = [(a, n - 2 - a) for a in pool if n - 2 - a in pool]
    if not single and not doubles:
        return None
    if single and (not doubles or rng.random() < 0.3):
        en, fr = rng.choice(pool[n - 1])
    else:
        a, b = rng.choice(sorted(doubles))
        (en1, fr1), (en2, fr2) = rng.choice(pool[a]), rng.choice(pool[b])
        en_conj, fr_conj = rng.choice(_CONJUNCTIONS)
        en, fr = en1 + [en_conj] + en2, fr1 + [fr_conj] + fr2
    return _en_join(en, "."), _fr_join(fr, ".")


def generate_long_pairs(seed: int = 0, num_pairs: int = 10_000, min_len: int = 5, max_len: int = 30) -> list[
    tuple[str, str]
]:
    """Distinct long (english, french) pairs, deterministic for ``seed``, spread evenly over English lengths.

    Sentences are drawn at random from the long grammar (relative clauses, coordination, adjuncts; see the module's
    source for the constructions) and kept by their English length in tokens, final punctuation included. The
    order is *stratified by length*: the lengths from ``min_len`` to ``max_len`` take turns, so any prefix has
    about as many sentences of each length, and short sentences do not drown the long ones. Every English sentence
    has exactly one French translation.

    Args:
        seed: seed of the random draws.
        num_pairs: how many pairs to return.
        min_len: the shortest English sentence, in tokens.
        max_len: the longest English sentence, in tokens (at most 40).
    Returns:
        a list of ``num_pairs`` distinct ``(english, french)`` pairs.
    Raises:
        TypeError: an argument is not an int (bool is not an int here).
        ValueError: ``num_pairs`` is below 1; ``min_len``/``max_len`` are not ``4 <= min_len <= max_len <= 40``;
            the grammar has too few distinct sentences of some length for ``num_pairs``.

    >>> pairs = generate_long_pairs(seed=0, num_pairs=52)
    >>> sorted({len(en.split()) for en, _ in pairs}) == list(range(5, 31))
    True
    """
    check_seed(seed)
    check_positive_int("num_pairs", num_pairs)
    check_positive_int("min_len", min_len)
    check_positive_int("max_len", max_len)
    if not 4 <= min_len <= max_len <= _LONG_MAX_TOKENS:
        raise ValueError(
            f"min_len, max_len: expected 4 <= min_len <= max_len <= {_LONG_MAX_TOKENS}, got {min_len} and {max_len}"
        )
    lengths = range(min_len, max_len + 1)
    quota = -(-num_pairs // len(lengths))  # ceil: enough of each length for the round robin
    rng = random.Random(seed)
    pool = _clause_pool(rng, 20_000)
    table: dict[str, str] = {}
    by_len: dict[int, list[str]] = {n: [] for n in lengths}
    for n in lengths:
        misses = 0
        while len(by_len[n]) < quota:
            pair = _long_sentence(rng, pool, n)
            if pair is None or misses > 20 * quota + 1000:
                raise ValueError(
                    f"num_pairs: the long grammar has only {len(by_len[n])} distinct sentences of {n} tokens, too "
                    f"few for {num_pairs} pairs; ask for fewer pairs or a narrower range of lengths"
                )
            en, fr = pair
            _check_format(en, ends=(".",), min_tokens=3, max_tokens=_LONG_MAX_TOKENS)
            _check_format(fr, ends=(".",), min_tokens=3, max_tokens=_LONG_MAX_TOKENS)
            if en in table:
                if table[en] != fr:
                    raise RuntimeError(f"grammar bug: {en!r} translates to both {table[en]!r} and {fr!r}")
                misses += 1
                continue
            table[en] = fr
            by_len[n].append(en)
    order = [by_len[n][turn] for turn in range(quota) for n in lengths]
    return [(en, table[en]) for en in order[:num_pairs]]
